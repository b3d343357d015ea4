package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestMetricsBlock(t *testing.T) {
	s, err := Parse([]byte(`{"Server": {"Metrics": {"Pprof": true, "Token": "m", "Username": "ops", "Password": "pw", "ProtectMetrics": true,
	  "TLS": {"CertFile": "c", "KeyFile": "k"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Metrics; m == nil || !m.Pprof || m.Token != "m" || m.Username != "ops" || !m.ProtectMetrics || m.TLS == nil || !m.HasLogin() {
		t.Fatalf("parsed %+v", s.Metrics)
	}
	if d := Default(); d.Metrics.HasLogin() {
		t.Fatal("the default metrics port has a login")
	}
	cases := []struct{ json, want string }{
		{`{"Username": "ops"}`, `key "Metrics.Password": must be set with Metrics.Username`},
		{`{"Password": "pw"}`, `key "Metrics.Username": must be set with Metrics.Password`},
		{`{"Username": "a:b", "Password": "pw"}`, `key "Metrics.Username"`},
		{`{"ProtectMetrics": true}`, `key "Metrics.ProtectMetrics": needs Metrics.Token`},
		{`{"TLS": {"CertFile": "c"}}`, `key "Metrics.TLS.KeyFile"`},
		{`{"TLS": {"CertFile": "c", "KeyFile": "k", "MinVersion": "1.1"}}`, `key "Metrics.TLS.MinVersion"`},
		{`{"Pprof": "yes"}`, `key "Metrics.Pprof": expected bool`},
		{`{"Tokens": "x"}`, `unknown key "Tokens"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(`{"Server": {"Metrics": ` + c.json + `}}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
}

// replicaOn is a valid static leader's config whose replication listener
// binds host, with the Replication keys in extra spliced in.
func replicaOn(host, extra string) string {
	return fmt.Sprintf(`{"Server": {"Port": 19092, "MetricsPort": 0, "AdvertisedAddress": "10.0.0.1:19092", "Replication": {
	  "Enabled": true, "ReplicaId": 1, "Role": "leader", "ReplicateHost": %q, "ReplicatePort": 9095, "ClientAddress": "10.0.0.1:19092",
	  "Peers": [{"Id": 2, "Address": "10.0.0.2:9095", "ClientAddress": "10.0.0.2:9092"}]%s}}}`, host, extra)
}

func TestReplicationListenerNeedsAuthBeyondLoopback(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "::", "10.0.0.1", "moonmq-0.moonmq", "127.0.0.1.example"} {
		_, err := Parse([]byte(replicaOn(host, "")))
		if err == nil || !strings.Contains(err.Error(), `key "Replication.Token": must be set when the replication port listens on "`+host+`"`) {
			t.Errorf("%s without a token: %v", host, err)
		}
	}
	// The default ReplicateHost is Host.
	_, err := Parse([]byte(`{"Server": {"Host": "0.0.0.0", "Port": 19092, "MetricsPort": 0, "AdvertisedAddress": "h:19092", "Replication": {
	  "Enabled": true, "ReplicaId": 1, "Role": "leader", "ReplicatePort": 9095, "ClientAddress": "h:19092"}}}`))
	if err == nil || !strings.Contains(err.Error(), `"Replication.Token": must be set when the replication port listens on "0.0.0.0" (every interface)`) {
		t.Errorf("Host 0.0.0.0 without a token: %v", err)
	}
	// Loopback needs nothing, as the tests and the bench tools run it.
	for _, host := range []string{"127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost", "LocalHost"} {
		if _, err := Parse([]byte(replicaOn(host, ""))); err != nil {
			t.Errorf("%s without a token: %v", host, err)
		}
	}
	// A token, or mutual TLS, lets it listen anywhere.
	ok := []string{
		`, "Token": "t"`,
		`, "TLS": {"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca", "RequireClientCert": true}`,
	}
	for _, extra := range ok {
		if _, err := Parse([]byte(replicaOn("0.0.0.0", extra))); err != nil {
			t.Errorf("0.0.0.0 with %s: %v", extra, err)
		}
	}
	// TLS without client certificates proves nothing about the caller.
	_, err = Parse([]byte(replicaOn("0.0.0.0", `, "TLS": {"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca"}`)))
	if err == nil || !strings.Contains(err.Error(), `"Replication.Token": must be set`) {
		t.Errorf("0.0.0.0 with server-only TLS: %v", err)
	}
	// A disabled block is not checked.
	if _, err := Parse([]byte(`{"Server": {"Host": "0.0.0.0", "AdvertisedAddress": "h:9092", "Replication": {"Enabled": false}}}`)); err != nil {
		t.Error(err)
	}
}

// TestSecurityDocExample: the production example of docs/SECURITY.md is a
// configuration the broker accepts, with both ports protected.
func TestSecurityDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Production: the operator ports")
	if !ok {
		t.Fatal(`docs/SECURITY.md has no "Production: the operator ports" section`)
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no JSON example in the section")
	}
	s, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Metrics.HasLogin() || s.Metrics.TLS == nil || s.Replication.Token == "" || s.Replication.TLS == nil || !s.Replication.TLS.RequireClientCert {
		t.Fatalf("the example leaves a port open: %+v %+v", s.Metrics, s.Replication)
	}
}
