package replication_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
)

// TestStatsAndMetricsShowReplication checks that the metrics port shows the
// replication status object, under replication in /stats and as
// Prometheus metrics, with per-follower lag: an operator watching only the
// metrics port sees the group's health.
func TestStatsAndMetricsShowReplication(t *testing.T) {
	ns, _ := failoverGroupWith(t, func(c *config.Server) {
		c.MetricsHost = "127.0.0.1"
		c.MetricsPort = freePort(t)
	})
	leader := servingLeader(t, ns, 0, 60*time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(leader.addr()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic("stats"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(n *node, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + n.in.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var stats struct {
		Role        string `json:"role"`
		Replication struct {
			Role      string  `json:"role"`
			ISR       []int32 `json:"isr"`
			Followers map[string]struct {
				Lag int64 `json:"lag"`
			} `json:"followers"`
		} `json:"replication"`
	}
	// Followers catch up asynchronously: wait until both report lag 0.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := json.Unmarshal([]byte(get(leader, "/stats")), &stats); err != nil {
			t.Fatal(err)
		}
		caughtUp := len(stats.Replication.Followers) == 2
		for _, f := range stats.Replication.Followers {
			caughtUp = caughtUp && f.Lag == 0
		}
		if stats.Role == "leader" && stats.Replication.Role == "leader" && len(stats.Replication.ISR) == 3 && caughtUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader /stats: %+v", stats)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := get(leader, "/metrics")
	for _, want := range []string{"moonmq_replication_leader 1", "moonmq_replication_isr_size 3", `moonmq_replication_follower_lag_records{follower=`} {
		if !strings.Contains(m, want) {
			t.Fatalf("leader /metrics lacks %q", want)
		}
	}
	for _, n := range ns {
		if n == leader {
			continue
		}
		if err := json.Unmarshal([]byte(get(n, "/stats")), &stats); err != nil {
			t.Fatal(err)
		}
		if stats.Role != "follower" || stats.Replication.Role != "follower" {
			t.Fatalf("replica %d /stats role %q / %q, want follower", n.id, stats.Role, stats.Replication.Role)
		}
		if m := get(n, "/metrics"); !strings.Contains(m, "moonmq_replication_leader 0") {
			t.Fatalf("replica %d /metrics lacks moonmq_replication_leader 0", n.id)
		}
	}

	// /health/ready: the serving leader and followers in the ISR are
	// ready, and stay so when another follower leaves the ISR.
	ready := func(n *node) int {
		resp, err := http.Get("http://" + n.in.MetricsAddr() + "/health/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, n := range ns {
		if code := ready(n); code != http.StatusOK {
			t.Fatalf("replica %d /health/ready %d while serving or in the ISR", n.id, code)
		}
	}
	var out *node
	for _, n := range ns {
		if n != leader {
			out = n
			break
		}
	}
	out.stop()
	deadline = time.Now().Add(60 * time.Second)
	for {
		var st struct {
			Replication struct {
				ISR []int32 `json:"isr"`
			} `json:"replication"`
		}
		_ = json.Unmarshal([]byte(get(leader, "/stats")), &st)
		if len(st.Replication.ISR) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d never left the ISR: %v", out.id, st.Replication.ISR)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range ns {
		if n != out && ready(n) != http.StatusOK {
			t.Fatalf("replica %d not ready after replica %d left the ISR", n.id, out.id)
		}
	}
}
