package cli

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/status"
)

// TestStatusMetricsLogin: a metrics port behind Metrics.Token (or
// Metrics.Username/Password, or Metrics.TLS) is asked with what the
// config or the flags give.
func TestStatusMetricsLogin(t *testing.T) {
	stats := status.Stats{NodeID: 1, Role: "standalone", Topics: 1, Partitions: []status.Partition{{Topic: "t", LogEndOffset: 4, HighWatermark: 4}}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, basic := r.BasicAuth()
		if r.Header.Get("Authorization") != "Bearer mtok" && !(basic && user == "ops" && pass == "pw") {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(stats)
	})
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	maddr := strings.TrimPrefix(plain.URL, "http://")

	code, _, stderr := runStatus("--metrics", maddr)
	if code != 1 || !strings.Contains(stderr, "wrong or missing token: pass --metrics-token or --config (the broker's Metrics.Token") {
		t.Fatalf("no token: %d %q", code, stderr)
	}
	code, out, stderr := runStatus("--metrics", maddr, "--metrics-token", "mtok")
	if code != 0 || !strings.Contains(out, "  t-0 ") {
		t.Fatalf("--metrics-token: %d %q %q", code, out, stderr)
	}

	dir := t.TempDir()
	host, port, _ := net.SplitHostPort(maddr)
	for _, login := range []string{`"Token": "mtok"`, `"Username": "ops", "Password": "pw"`} {
		path := dir + "/c.json"
		writeFile(t, path, fmt.Sprintf(`{"Server": {"MetricsHost": %q, "MetricsPort": %s, "Metrics": {%s}}}`, host, port, login))
		code, out, stderr = runStatus("--config", path)
		if code != 0 || !strings.Contains(out, "  t-0 ") {
			t.Fatalf("config with %s: %d %q %q", login, code, out, stderr)
		}
		// The flag overrides the config.
		code, _, stderr = runStatus("--config", path, "--metrics-token", "wrong")
		if code != 1 || !strings.Contains(stderr, "wrong or missing token") {
			t.Fatalf("config with %s, wrong --metrics-token: %d %q", login, code, stderr)
		}
	}

	// Over TLS: the CA from --metrics-cacert.
	secure := httptest.NewTLSServer(handler)
	t.Cleanup(secure.Close)
	saddr := strings.TrimPrefix(secure.URL, "https://")
	ca := dir + "/ca.pem"
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runStatus("--metrics", saddr, "--metrics-token", "mtok", "--metrics-cacert", ca)
	if code != 0 || !strings.Contains(out, "  t-0 ") {
		t.Fatalf("TLS: %d %q %q", code, out, stderr)
	}
	code, _, stderr = runStatus("--metrics", saddr, "--metrics-token", "mtok")
	if code != 1 || !strings.Contains(stderr, "serves TLS: pass --config with the broker's Metrics.TLS, or --metrics-cacert") {
		t.Fatalf("TLS asked in plain HTTP: %d %q", code, stderr)
	}
	shost, sport, _ := net.SplitHostPort(saddr)
	path := dir + "/tls.json"
	writeFile(t, path, fmt.Sprintf(`{"Server": {"MetricsHost": %q, "MetricsPort": %s, "Metrics": {"Token": "mtok", "TLS": {"CertFile": "c", "KeyFile": "k"}}}}`, shost, sport))
	// Metrics.TLS without --metrics-cacert: the system's CAs do not know
	// the test server's.
	code, _, stderr = runStatus("--config", path)
	if code != 1 || !strings.Contains(stderr, "is not trusted") || !strings.Contains(stderr, "--metrics-cacert") {
		t.Fatalf("TLS with the system's CAs: %d %q", code, stderr)
	}
	code, out, stderr = runStatus("--config", path, "--metrics-cacert", ca)
	if code != 0 || !strings.Contains(out, "  t-0 ") {
		t.Fatalf("TLS from config: %d %q %q", code, out, stderr)
	}
}
