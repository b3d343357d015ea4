package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// tlsHandshakeTimeout bounds how long a connection may take to finish its
// TLS handshake, so idle or slow peers cannot hold connections open
// without ever speaking Kafka.
const tlsHandshakeTimeout = 10 * time.Second

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
