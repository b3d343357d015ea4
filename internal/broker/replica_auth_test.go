package broker

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/status"
)

// startStaticLeader starts a static-mode leader whose replication port
// binds host with token, and returns the broker and that port's address.
func startStaticLeader(t *testing.T, host, token string) (*Broker, string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 1, Role: "leader",
		ReplicateHost: host, ReplicatePort: port, ClientAddress: "127.0.0.1:9092", Token: token,
		Peers: []config.Peer{{Id: 2, Address: "127.0.0.1:1", ClientAddress: "127.0.0.1:2"}}}
	b, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, "", err
	}
	t.Cleanup(func() { b.Close() })
	return b, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func askReplication(t *testing.T, method, url, authz string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body
}

// TestReplicaPortRefusesWrongToken: every endpoint of the replication
// port (the status, log shipping, forwarding) refuses a missing or wrong
// token with 401 and a challenge, and serves the right one.
func TestReplicaPortRefusesWrongToken(t *testing.T) {
	_, addr, err := startStaticLeader(t, "127.0.0.1", "right-token")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	for _, ep := range []struct{ method, path string }{
		{http.MethodGet, PathStatus}, {http.MethodGet, "/replication/manifest"}, {http.MethodPost, PathForward},
	} {
		for _, authz := range []string{"", "Bearer wrong", "Bearer right-toke", "Bearer right-token2", "right-token", "Basic cmlnaHQtdG9rZW4="} {
			code, challenge, _ := askReplication(t, ep.method, base+ep.path, authz)
			if code != http.StatusUnauthorized || challenge != `Bearer realm="replication"` {
				t.Errorf("%s %s with %q: %d %q, want 401 with a Bearer challenge", ep.method, ep.path, authz, code, challenge)
			}
		}
	}
	code, _, body := askReplication(t, http.MethodGet, base+PathStatus, "Bearer right-token")
	var d status.Replication
	if code != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Role != "leader" || d.ReplicaID != 1 {
		t.Fatalf("status with the token: %d %s", code, body)
	}
}

// TestReplicaListenerBeyondLoopbackNeedsToken: the broker itself refuses
// to open a replication port beyond loopback without a token, also for a
// configuration that never went through Parse; on loopback it needs none.
func TestReplicaListenerBeyondLoopbackNeedsToken(t *testing.T) {
	for _, host := range []string{"0.0.0.0", ""} {
		if _, _, err := startStaticLeader(t, host, ""); err == nil || !strings.Contains(err.Error(), `"Replication.Token": must be set`) {
			t.Errorf("ReplicateHost %q without a token: %v", host, err)
		}
	}
	_, addr, err := startStaticLeader(t, "127.0.0.1", "")
	if err != nil {
		t.Fatalf("loopback without a token: %v", err)
	}
	if code, _, body := askReplication(t, http.MethodGet, "http://"+addr+PathStatus, ""); code != http.StatusOK {
		t.Fatalf("loopback without a token: status %d %s", code, body)
	}
}
