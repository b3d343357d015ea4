package auth

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/testcerts"
)

func TestLoadTLS(t *testing.T) {
	if c, err := LoadListenerTLS(nil, "TLS"); c != nil || err != nil {
		t.Fatalf("no TLS block: %v, %v", c, err)
	}
	if p, err := LoadPeerTLS(nil, "Replication.TLS"); p != nil || err != nil || p.Scheme() != "http" || p.ClientConfig() != nil {
		t.Fatalf("no Replication.TLS block: %v, %v", p, err)
	}
	certs, err := testcerts.Generate(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	f := &TLSFiles{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.CAFile, RequireClientCert: true, MinVersion: "1.3"}
	c, err := LoadListenerTLS(f, "TLS")
	if err != nil || c.ClientAuth != tls.RequireAndVerifyClientCert || c.MinVersion != tls.VersionTLS13 {
		t.Fatalf("listener: %v", err)
	}
	// The test server certificate has no clientAuth usage, which mutual
	// TLS on the replication port needs.
	if _, err := LoadPeerTLS(f, "Replication.TLS"); err == nil || !strings.Contains(err.Error(), `"Replication.TLS.CertFile"`) {
		t.Fatalf("peer with a server-only certificate under mutual TLS: %v", err)
	}
	f.RequireClientCert = false
	p, err := LoadPeerTLS(f, "Replication.TLS")
	if err != nil || p.Scheme() != "https" || p.ClientConfig() == nil || p.Server.ClientAuth != tls.NoClientCert {
		t.Fatalf("peer: %v", err)
	}
	f.CertFile = "/nonexistent/cert.pem"
	if _, err := LoadListenerTLS(f, "TLS"); err == nil || !strings.Contains(err.Error(), `"TLS.CertFile"/"TLS.KeyFile"`) {
		t.Fatalf("a missing certificate: %v", err)
	}
}
