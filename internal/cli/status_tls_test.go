package cli

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcerts"
)

// tlsBroker serves a status object behind token "tok" over TLS with the
// server certificate of certs, requiring a client certificate signed by
// their CA when mutual is set; it returns the address.
func tlsBroker(t *testing.T, certs *testcerts.Set, mutual bool, doc status.Replication) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	if mutual {
		srv.TLS.ClientCAs = certs.CAs
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// Handshakes the tests make fail on purpose would print to stderr.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

func genCerts(t *testing.T) *testcerts.Set {
	t.Helper()
	s, err := testcerts.Generate(t.TempDir(), "moonmq-status")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStatusOverTLS(t *testing.T) {
	certs, other := genCerts(t), genCerts(t)
	doc := status.Replication{Role: "follower", ReplicaID: 2, Leader: 1, Epoch: 3, ISR: []int32{1, 2}}
	addr := tlsBroker(t, certs, false, doc)

	code, out, stderr := runStatus("--addr", addr, "--token", "tok", "--cacert", certs.CAFile)
	if code != 0 || !strings.Contains(out, "replication status from "+addr) {
		t.Fatalf("with --cacert: %d %q %q", code, out, stderr)
	}
	// Plain HTTP to the TLS port: the broker's 400 becomes advice.
	code, _, stderr = runStatus("--addr", addr, "--token", "tok")
	if code != 1 || !strings.Contains(stderr, "serves TLS: pass --cacert FILE") {
		t.Fatalf("plain HTTP to TLS: %d %q", code, stderr)
	}
	// A CA that did not sign the broker's certificate.
	code, _, stderr = runStatus("--addr", addr, "--token", "tok", "--cacert", other.CAFile)
	if code != 1 || !strings.Contains(stderr, "is not trusted") || !strings.Contains(stderr, "unknown authority") {
		t.Fatalf("wrong CA: %d %q", code, stderr)
	}
	// The token still applies over TLS.
	code, _, stderr = runStatus("--addr", addr, "--cacert", certs.CAFile)
	if code != 1 || !strings.Contains(stderr, "wrong or missing token") {
		t.Fatalf("no token over TLS: %d %q", code, stderr)
	}
	// TLS to a plain HTTP port.
	plain, _ := fakeBroker(t, doc, status.Stats{})
	code, _, stderr = runStatus("--addr", plain, "--token", "tok", "--cacert", certs.CAFile)
	if code != 1 || !strings.Contains(stderr, "serves plain HTTP, not TLS") {
		t.Fatalf("TLS to plain HTTP: %d %q", code, stderr)
	}
	// Bad flags and files.
	code, _, stderr = runStatus("--addr", addr, "--cert", certs.ClientCertFile)
	if code != 2 || !strings.Contains(stderr, "--cert and --key go together") {
		t.Fatalf("--cert alone: %d %q", code, stderr)
	}
	code, _, stderr = runStatus("--addr", addr, "--cacert", certs.ClientKeyFile)
	if code != 2 || !strings.Contains(stderr, "holds no PEM certificate") {
		t.Fatalf("a key as CA: %d %q", code, stderr)
	}
}

func TestStatusOverMutualTLS(t *testing.T) {
	certs := genCerts(t)
	doc := status.Replication{Role: "follower", ReplicaID: 2, Leader: 1, Epoch: 3, ISR: []int32{1, 2}}
	addr := tlsBroker(t, certs, true, doc)

	code, _, stderr := runStatus("--addr", addr, "--token", "tok", "--cacert", certs.CAFile)
	if code != 1 || !strings.Contains(stderr, "requires a client certificate") || !strings.Contains(stderr, "--cert FILE --key FILE") {
		t.Fatalf("without a client certificate: %d %q", code, stderr)
	}
	code, out, stderr := runStatus("--addr", addr, "--token", "tok", "--cacert", certs.CAFile,
		"--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile)
	if code != 0 || !strings.Contains(out, "replica 2: follower") {
		t.Fatalf("with a client certificate: %d %q %q", code, out, stderr)
	}

	// From the broker's config: the CA and, as the port requires one, its
	// certificate (here the test CA's client certificate stands in for a
	// replica's, which carries clientAuth too).
	host, port, _ := net.SplitHostPort(addr)
	path := t.TempDir() + "/c.json"
	writeFile(t, path, fmt.Sprintf(`{"Server": {"MetricsPort": 0, "Replication": {"Enabled": true, "ReplicaId": 2, "Role": "follower",
		"ReplicateHost": %q, "ReplicatePort": %s, "ClientAddress": "127.0.0.1:9092", "Token": "tok",
		"Peers": [{"Id": 1, "Address": "127.0.0.1:1", "ClientAddress": "127.0.0.1:2"}],
		"TLS": {"CertFile": %q, "KeyFile": %q, "ClientCAFile": %q, "RequireClientCert": true}}}}`,
		host, port, certs.ClientCertFile, certs.ClientKeyFile, certs.CAFile))
	code, out, stderr = runStatus("--config", path)
	if code != 0 || !strings.Contains(out, "replica 2: follower") {
		t.Fatalf("--config: %d %q %q", code, out, stderr)
	}
	// A config naming a key file that is not there: the error names the
	// key it came from.
	writeFile(t, path, fmt.Sprintf(`{"Server": {"MetricsPort": 0, "Replication": {"Enabled": true, "ReplicaId": 2, "Role": "follower",
		"ReplicateHost": %q, "ReplicatePort": %s, "ClientAddress": "127.0.0.1:9092", "Token": "tok",
		"Peers": [{"Id": 1, "Address": "127.0.0.1:1", "ClientAddress": "127.0.0.1:2"}],
		"TLS": {"CertFile": %q, "KeyFile": "/nonexistent/key.pem", "ClientCAFile": %q, "RequireClientCert": true}}}}`,
		host, port, certs.ClientCertFile, certs.CAFile))
	code, _, stderr = runStatus("--config", path)
	if code != 2 || !strings.Contains(stderr, "Replication.TLS.CertFile/KeyFile of "+path) {
		t.Fatalf("missing key file: %d %q", code, stderr)
	}
	// Flags override the config's files.
	code, out, stderr = runStatus("--config", path, "--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile)
	if code != 0 || !strings.Contains(out, "replica 2: follower") {
		t.Fatalf("--config with --cert/--key: %d %q %q", code, out, stderr)
	}
}
