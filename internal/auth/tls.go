package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles is a TLS block of the configuration: PEM files and options.
// Its fields are config.TLS's, in the same order, so that the broker can
// convert one to the other (this package cannot import config, which
// imports it).
type TLSFiles struct {
	CertFile          string
	KeyFile           string
	ClientCAFile      string
	RequireClientCert bool
	MinVersion        string
}

// LoadListenerTLS builds a listener's TLS configuration, the client
// port's (Server.TLS) or the metrics port's (Metrics.TLS); nil files mean
// plaintext. A client certificate is verified when ClientCAFile is
// set, and required with RequireClientCert. Errors name the config key
// (key is the block's, such as "TLS") whose file is wrong.
func LoadListenerTLS(f *TLSFiles, key string) (*tls.Config, error) {
	if f == nil {
		return nil, nil
	}
	cert, err := f.keyPair(key)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   f.minVersion(),
		ClientAuth:   tls.NoClientCert,
	}
	if f.ClientCAFile != "" {
		if tc.ClientCAs, err = f.caPool(key); err != nil {
			return nil, err
		}
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		if f.RequireClientCert {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return tc, nil
}

// PeerTLS is the replication port's TLS: one side for the listener, one
// for every request a replica sends its peers (shipping, Raft, leader
// discovery). A nil *PeerTLS is plain HTTP.
type PeerTLS struct {
	Server *tls.Config
	Client *tls.Config
}

// LoadPeerTLS reads the replication port's files and checks that the
// certificate is one the peers will accept, so that a mistake stops the
// broker at start naming the key (key is the block's, such as
// "Replication.TLS") instead of showing up as handshake failures on every
// peer. nil files mean plain HTTP.
func LoadPeerTLS(f *TLSFiles, key string) (*PeerTLS, error) {
	if f == nil {
		return nil, nil
	}
	cert, err := f.keyPair(key)
	if err != nil {
		return nil, err
	}
	ca, err := f.caPool(key)
	if err != nil {
		return nil, err
	}
	// The peers verify this certificate against the same CA: as their
	// server (every time) and as their client (under mutual TLS, where
	// Go checks the clientAuth extended key usage). Names are not
	// checked here: which name a peer dials is in its config, not ours.
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("config key \"%s.CertFile\": %w", key, err)
		}
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	type usage struct {
		eku  x509.ExtKeyUsage
		what string
	}
	usages := []usage{{x509.ExtKeyUsageServerAuth, "server (serverAuth)"}}
	if f.RequireClientCert {
		usages = append(usages, usage{x509.ExtKeyUsageClientAuth, "client (clientAuth: with RequireClientCert it is also this replica's client certificate)"})
	}
	for _, u := range usages {
		opts := x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u.eku}}
		if _, err := leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("config key \"%s.CertFile\": %s does not verify as a %s certificate against %s.ClientCAFile, so the peers (which share that CA) would refuse it: %w", key, f.CertFile, u.what, key, err)
		}
	}
	server := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   f.minVersion(),
		// Not asking for a certificate unless it is required: the
		// replication port has no use for an optional one (the Token
		// authorizes), and a peer whose certificate lacks clientAuth
		// would fail a handshake it did not need.
		ClientAuth: tls.NoClientCert,
	}
	if f.RequireClientCert {
		server.ClientCAs = ca
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	client := &tls.Config{
		RootCAs: ca,
		// Sent only when the peer asks for it (its RequireClientCert).
		Certificates: []tls.Certificate{cert},
		MinVersion:   f.minVersion(),
	}
	return &PeerTLS{Server: server, Client: client}, nil
}

// Scheme is the URL scheme of the replication port.
func (t *PeerTLS) Scheme() string {
	if t == nil {
		return "http"
	}
	return "https"
}

// ClientConfig is the TLS configuration for requests to peers, nil for
// plain HTTP.
func (t *PeerTLS) ClientConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return t.Client
}

func (f *TLSFiles) keyPair(key string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return cert, fmt.Errorf("config keys \"%s.CertFile\"/\"%s.KeyFile\" (%s, %s): %w", key, key, f.CertFile, f.KeyFile, err)
	}
	return cert, nil
}

func (f *TLSFiles) caPool(key string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("config key \"%s.ClientCAFile\": %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("config key \"%s.ClientCAFile\": %s holds no PEM certificate", key, f.ClientCAFile)
	}
	return pool, nil
}

func (f *TLSFiles) minVersion() uint16 {
	if f.MinVersion == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}
