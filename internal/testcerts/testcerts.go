// Package testcerts makes a throwaway certificate authority and the
// certificates TLS tests need (a broker certificate for loopback, a client
// certificate for mutual TLS), written as PEM files. It is test support
// only: keys are weakly protected files in the directory given.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is a CA with a server and a client certificate, as files and as
// ready-to-use Go values.
type Set struct {
	// CAFile, ServerCertFile, ServerKeyFile, ClientCertFile and
	// ClientKeyFile are PEM files.
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
	// CAs trusts the CA (for a client's RootCAs).
	CAs *x509.CertPool
	// Client is the client certificate with its key (for mutual TLS).
	Client tls.Certificate
	// ClientName is the client certificate's common name.
	ClientName string
}

// Generate writes a new CA, a server certificate valid for 127.0.0.1, ::1
// and localhost, and a client certificate named clientName into dir.
func Generate(dir, clientName string) (*Set, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "MoonMQ test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	s := &Set{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		CAs:            x509.NewCertPool(),
		ClientName:     clientName,
	}
	s.CAs.AddCert(ca)
	if err := writePEM(s.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, certFile, keyFile string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name, Organization: []string{"MoonMQ tests"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.LoadX509KeyPair(certFile, keyFile)
	}
	if _, err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, s.ServerCertFile, s.ServerKeyFile); err != nil {
		return nil, err
	}
	if s.Client, err = leaf(3, clientName, x509.ExtKeyUsageClientAuth, s.ClientCertFile, s.ClientKeyFile); err != nil {
		return nil, err
	}
	return s, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
