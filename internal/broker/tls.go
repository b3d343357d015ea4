package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/moonmq/moonmq/internal/config"
)

// tlsHandshakeTimeout bounds how long a connection may take to finish its
// TLS handshake, so idle or slow peers cannot hold connections open
// without ever speaking Kafka.
const tlsHandshakeTimeout = 10 * time.Second

// loadTLS builds the client port's TLS configuration. Errors name the key
// whose file is wrong.
func loadTLS(t *config.TLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("config keys \"TLS.CertFile\"/\"TLS.KeyFile\" (%s, %s): %w", t.CertFile, t.KeyFile, err)
	}
	tc := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		ClientAuth:   tls.NoClientCert,
	}
	if t.MinVersion == "1.3" {
		tc.MinVersion = tls.VersionTLS13
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("config key \"TLS.ClientCAFile\": %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config key \"TLS.ClientCAFile\": %s holds no PEM certificate", t.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		if t.RequireClientCert {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return tc, nil
}

// tlsHandshake completes a TLS connection's handshake before anything is
// read from it, so a failure is logged as what it is. It returns the
// verified client certificate's subject ("" without one).
func (cn *conn) tlsHandshake() (string, error) {
	tc, ok := cn.c.(*tls.Conn)
	if !ok {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(cn.ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return "", fmt.Errorf("TLS handshake failed (is the client configured for TLS, and does it trust the broker's certificate?): %w", err)
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
		return st.PeerCertificates[0].Subject.String(), nil
	}
	return "", nil
}

// tlsListener wraps a listener in the broker's TLS configuration, if any.
func (b *Broker) tlsListener(ln net.Listener) net.Listener {
	if b.sec.tls == nil {
		return ln
	}
	return tls.NewListener(ln, b.sec.tls)
}
