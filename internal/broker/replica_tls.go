package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/config"
)

// replTLS is the replication port's TLS (Replication.TLS): one side for
// the listener, one for every request this replica sends its peers
// (shipping, Raft, leader discovery).
type replTLS struct {
	server *tls.Config
	client *tls.Config
}

// loadReplicationTLS reads Replication.TLS's files and checks that the
// certificate is one the peers will accept, so that a mistake stops the
// broker at start naming the key instead of showing up as handshake
// failures on every peer. nil means plain HTTP.
func loadReplicationTLS(t *config.TLS) (*replTLS, error) {
	if t == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("config keys \"Replication.TLS.CertFile\"/\"Replication.TLS.KeyFile\" (%s, %s): %w", t.CertFile, t.KeyFile, err)
	}
	pem, err := os.ReadFile(t.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("config key \"Replication.TLS.ClientCAFile\": %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("config key \"Replication.TLS.ClientCAFile\": %s holds no PEM certificate", t.ClientCAFile)
	}
	// The peers verify this certificate against the same CA: as their
	// server (every time) and as their client (under mutual TLS, where
	// Go checks the clientAuth extended key usage). Names are not
	// checked here: which name a peer dials is in its config, not ours.
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("config key \"Replication.TLS.CertFile\": %w", err)
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
	if t.RequireClientCert {
		usages = append(usages, usage{x509.ExtKeyUsageClientAuth, "client (clientAuth: with RequireClientCert it is also this replica's client certificate)"})
	}
	for _, u := range usages {
		opts := x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u.eku}}
		if _, err := leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("config key \"Replication.TLS.CertFile\": %s does not verify as a %s certificate against Replication.TLS.ClientCAFile, so the peers (which share that CA) would refuse it: %w", t.CertFile, u.what, err)
		}
	}
	minVersion := uint16(tls.VersionTLS12)
	if t.MinVersion == "1.3" {
		minVersion = tls.VersionTLS13
	}
	server := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   minVersion,
		// Not asking for a certificate unless it is required: the
		// replication port has no use for an optional one (the Token
		// authorizes), and a peer whose certificate lacks clientAuth
		// would fail a handshake it did not need.
		ClientAuth: tls.NoClientCert,
	}
	if t.RequireClientCert {
		server.ClientCAs = ca
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	client := &tls.Config{
		RootCAs: ca,
		// Sent only when the peer asks for it (its RequireClientCert).
		Certificates: []tls.Certificate{cert},
		MinVersion:   minVersion,
	}
	return &replTLS{server: server, client: client}, nil
}

// scheme is the URL scheme of the replication port.
func (t *replTLS) scheme() string {
	if t == nil {
		return "http"
	}
	return "https"
}

// clientConfig is the TLS configuration for requests to peers, nil for
// plain HTTP.
func (t *replTLS) clientConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return t.client
}

// handshakeRelog is how often failed handshakes from one address are
// logged: a misconfigured peer retries several times a second.
const handshakeRelog = time.Minute

// serverErrorLog is the replication HTTP server's ErrorLog: its lines go to
// log, failed TLS handshakes at most once per handshakeRelog and address
// (with the number left out).
func serverErrorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(&handshakeLog{log: log, last: map[string]handshakeSeen{}}, "", 0)
}

type handshakeSeen struct {
	at         time.Time
	suppressed int
}

type handshakeLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]handshakeSeen // by address without port
}

// handshakePrefix starts net/http's line for a failed handshake:
// "http: TLS handshake error from 127.0.0.1:5555: <reason>".
const handshakePrefix = "http: TLS handshake error from "

func (h *handshakeLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	rest, ok := strings.CutPrefix(line, handshakePrefix)
	if !ok {
		h.log.Warn("replication HTTP server: " + line)
		return len(p), nil
	}
	from, reason, _ := strings.Cut(rest, ": ")
	host := from
	if hh, _, err := net.SplitHostPort(from); err == nil {
		host = hh
	}
	now := time.Now()
	h.mu.Lock()
	seen, known := h.last[host]
	if known && now.Sub(seen.at) < handshakeRelog {
		seen.suppressed++
		h.last[host] = seen
		h.mu.Unlock()
		return len(p), nil
	}
	if len(h.last) >= 1024 {
		// Many addresses (a scan): forget the quiet ones so the map
		// stays bounded.
		for k, v := range h.last {
			if now.Sub(v.at) >= handshakeRelog {
				delete(h.last, k)
			}
		}
	}
	h.last[host] = handshakeSeen{at: now}
	h.mu.Unlock()
	h.log.Warn("replication: TLS handshake with a client of the replication port failed; every replica needs Replication.TLS with the same CA (ClientCAFile) and a certificate it signed",
		"from", from, "err", reason, "not_logged_since_last", seen.suppressed)
	return len(p), nil
}
