package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/status"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func runStatus(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Status(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// fakeBroker serves a status object on a replication port, behind token
// "tok", and a /stats document on a metrics port; it returns both
// addresses.
func fakeBroker(t *testing.T, doc status.Replication, stats status.Stats) (string, string) {
	repl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathStatus {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(repl.Close)
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathStats {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(stats)
	}))
	t.Cleanup(metrics.Close)
	return strings.TrimPrefix(repl.URL, "http://"), strings.TrimPrefix(metrics.URL, "http://")
}

func TestStatusErrorsSayWhatToDo(t *testing.T) {
	addr, maddr := fakeBroker(t, status.Replication{Role: "follower"}, status.Stats{})

	code, _, stderr := runStatus("--addr", addr)
	if code != 1 || !strings.Contains(stderr, "wrong or missing token: pass --token or --config") {
		t.Fatalf("no token: %d %q", code, stderr)
	}
	code, _, stderr = runStatus("--addr", addr, "--token", "nope")
	if code != 1 || !strings.Contains(stderr, "wrong or missing token") {
		t.Fatalf("wrong token: %d %q", code, stderr)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	code, _, stderr = runStatus("--addr", closed, "--token", "tok")
	if code != 1 || !strings.Contains(stderr, "nothing listens on "+closed+": is the broker running?") {
		t.Fatalf("refused: %d %q", code, stderr)
	}

	// A port that is not HTTP (the Kafka client port closes on a bad frame).
	kafka, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer kafka.Close()
	go func() {
		for {
			c, err := kafka.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	code, _, stderr = runStatus("--addr", kafka.Addr().String(), "--token", "tok")
	if code != 1 || !strings.Contains(stderr, "without an HTTP answer: is it the replication port?") || !strings.Contains(stderr, "--addr") {
		t.Fatalf("not HTTP: %d %q", code, stderr)
	}

	// The metrics port mistaken for the replication port.
	code, _, stderr = runStatus("--addr", maddr, "--token", "tok")
	if code != 1 || !strings.Contains(stderr, "has no /replication/status: is it the replication port?") {
		t.Fatalf("404: %d %q", code, stderr)
	}

	code, _, stderr = runStatus("--addr", addr, "extra")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Fatalf("usage: %d %q", code, stderr)
	}
}

func TestStatusFromConfig(t *testing.T) {
	doc := status.Replication{Role: "leader", ReplicaID: 1, Leader: 1, Epoch: 1, ISR: []int32{1, 2},
		Followers: map[string]status.FollowerPosition{"2": {Partitions: map[string]int64{"t-0": 3}}}}
	stats := status.Stats{Partitions: []status.Partition{{Topic: "t", LogEndOffset: 10}}}
	addr, maddr := fakeBroker(t, doc, stats)
	host, port, _ := net.SplitHostPort(addr)
	mhost, mport, _ := net.SplitHostPort(maddr)
	path := t.TempDir() + "/c.json"
	writeFile(t, path, fmt.Sprintf(`{"Server": {"MetricsHost": %q, "MetricsPort": %s, "Replication": {"Enabled": true, "ReplicaId": 1, "Role": "leader",
		"ReplicateHost": %q, "ReplicatePort": %s, "ClientAddress": "127.0.0.1:9092", "Token": "tok",
		"Peers": [{"Id": 2, "Address": "127.0.0.1:1", "ClientAddress": "127.0.0.1:2"}]}}}`, mhost, mport, host, port))

	code, out, stderr := runStatus("--config", path)
	if code != 0 || !strings.Contains(out, "replica 1: leader (static mode)") {
		t.Fatalf("%d %q %q", code, out, stderr)
	}
	// The leader's log end came from the metrics port: follower 2 lacks 7.
	if !strings.Contains(out, "t-0 (7)") {
		t.Fatalf("no lag from /stats:\n%s", out)
	}
	// --token overrides the config, even to empty.
	code, _, stderr = runStatus("--config", path, "--token", "")
	if code != 1 || !strings.Contains(stderr, "wrong or missing token") {
		t.Fatalf("%d %q", code, stderr)
	}
	code, out, _ = runStatus("--config", path, "--json")
	var back status.Replication
	if code != 0 || json.Unmarshal([]byte(out), &back) != nil || back.Role != "leader" {
		t.Fatalf("--json: %d %q", code, out)
	}
}

func TestStatusSingleNode(t *testing.T) {
	_, maddr := fakeBroker(t, status.Replication{}, status.Stats{NodeID: 1, Role: "standalone", Topics: 1, Partitions: []status.Partition{{Topic: "t", LogEndOffset: 4, HighWatermark: 4}}})
	code, out, stderr := runStatus("--metrics", maddr)
	if code != 0 || !strings.Contains(out, "replication: off (the default configuration has none") || !strings.Contains(out, "  t-0 ") {
		t.Fatalf("%d %q %q", code, out, stderr)
	}
	path := t.TempDir() + "/c.json"
	writeFile(t, path, `{"Server": {"MetricsPort": 0}}`)
	code, _, stderr = runStatus("--config", path)
	if code != 1 || !strings.Contains(stderr, "the metrics port is off (Server.MetricsPort 0)") {
		t.Fatalf("%d %q", code, stderr)
	}
}
