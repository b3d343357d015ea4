package main

import (
	"testing"

	moonmqconfig "github.com/moonmq/moonmq/internal/config"
)

// The configs replbench writes must be ones `moonmq serve` accepts: a plain
// single node, and a failover group whose every member names the others;
// with profiles asked for, every replica serves pprof.
func TestWriteConfigs(t *testing.T) {
	for _, c := range []struct {
		n           int
		serverExtra string
		pprof       bool
	}{{1, `"Acks": "all"`, false}, {3, `"Acks": "all"`, false}, {5, "", false}, {1, "", true}, {3, `"Acks": "all"`, true}} {
		n := c.n
		rs, err := writeConfigs(t.TempDir(), n, c.serverExtra, "", c.pprof)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != n {
			t.Fatalf("%d replicas, want %d", len(rs), n)
		}
		for _, r := range rs {
			s, err := moonmqconfig.Load(r.configPath)
			if err != nil {
				t.Fatalf("n=%d replica %d: %v", n, r.id, err)
			}
			if got := s.Metrics != nil && s.Metrics.Pprof; got != c.pprof {
				t.Errorf("n=%d replica %d: pprof %v, want %v", n, r.id, got, c.pprof)
			}
			rep := s.Replication
			switch {
			case n == 1 && rep != nil && rep.Enabled:
				t.Errorf("single node has replication enabled")
			case n > 1 && (rep == nil || !rep.Enabled || !rep.Failover.Enabled || len(rep.Peers) != n-1 || rep.ReplicaId != r.id || rep.Token != token):
				t.Errorf("n=%d replica %d: replication block %+v", n, r.id, rep)
			}
		}
	}
}

// topicName must follow internal/bench's naming, which `moonmq bench
// --no-create` uses to find the topic replbench created.
func TestTopicName(t *testing.T) {
	for _, tc := range []struct {
		c    caseSpec
		want string
	}{
		{caseSpec{-1, 1, "pipelined"}, "p-r-acksall-p1-pipe"},
		{caseSpec{-1, 8, "one-at-a-time"}, "p-r-acksall-p8-sync"},
		{caseSpec{1, 8, "transactional"}, "p-r-acks1-p8-txn"},
	} {
		if got := topicName("p", "r", tc.c); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
