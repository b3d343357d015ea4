package main

import (
	"fmt"
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
		rs, err := writeConfigs(t.TempDir(), n, 1, c.serverExtra, "", c.pprof)
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

// A cluster's configs: groups of n, each replica's peers its own group's,
// one leader per group, and three metadata voters spread over the groups,
// all accepted by `moonmq serve`.
func TestWriteClusterConfigs(t *testing.T) {
	rs, err := writeConfigs(t.TempDir(), 3, 2, "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 {
		t.Fatalf("%d replicas, want 6", len(rs))
	}
	voterGroups := map[string]int{}
	for _, r := range rs {
		s, err := moonmqconfig.Load(r.configPath)
		if err != nil {
			t.Fatalf("replica %d: %v", r.id, err)
		}
		c, rep := s.Cluster, s.Replication
		if c == nil || !c.Enabled || !c.Experimental || c.BrokerId != r.id || c.GroupId != fmt.Sprintf("g%d", r.group) || len(c.MetadataVoters) != 3 {
			t.Fatalf("replica %d: cluster block %+v", r.id, c)
		}
		if len(rep.Peers) != 2 {
			t.Fatalf("replica %d: peers %+v, want the other two of its group", r.id, rep.Peers)
		}
		for _, p := range rep.Peers {
			if (p.Id-1)/3 != (r.id-1)/3 {
				t.Fatalf("replica %d of group %d has peer %d of another group", r.id, r.group, p.Id)
			}
		}
		if want := (r.id-1)%3 == 0; (rep.Role == "leader") != want {
			t.Fatalf("replica %d: role %s", r.id, rep.Role)
		}
		if r.id == 1 {
			for _, v := range c.MetadataVoters {
				voterGroups[fmt.Sprint((v.Id-1)/3)]++
			}
		}
	}
	if len(voterGroups) != 2 || voterGroups["0"] != 2 || voterGroups["1"] != 1 {
		t.Fatalf("voters by group %v, want two in the first and one in the second", voterGroups)
	}
}

// topicName must follow internal/bench's naming, which `moonmq bench
// --no-create` uses to find the topic replbench created.
func TestTopicName(t *testing.T) {
	for _, tc := range []struct {
		c    caseSpec
		want string
	}{
		{caseSpec{acks: -1, partitions: 1, mode: "pipelined"}, "p-r-acksall-p1-pipe"},
		{caseSpec{acks: -1, partitions: 8, mode: "one-at-a-time"}, "p-r-acksall-p8-sync"},
		{caseSpec{acks: 1, partitions: 8, mode: "transactional"}, "p-r-acks1-p8-txn"},
	} {
		if got := topicName("p", "r", tc.c); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
