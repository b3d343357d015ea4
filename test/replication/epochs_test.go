package replication_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/broker"
)

type epochEntry struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"startOffset"`
}

// epochsOf reads topic's partition history from a replica's
// replication-epochs.json (nil, false if the file or the partition is
// missing).
func epochsOf(t *testing.T, n *node, topic string, partition int32) ([]epochEntry, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.cfg.DataDir, broker.EpochsFile))
	if err != nil {
		return nil, false
	}
	var doc struct {
		Version    int `json:"version"`
		Partitions []struct {
			Topic     string       `json:"topic"`
			Partition int32        `json:"partition"`
			Epochs    []epochEntry `json:"epochs"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.Version != 1 {
		t.Fatalf("replica %d: %s: %v (version %d): %s", n.id, broker.EpochsFile, err, doc.Version, data)
	}
	for _, p := range doc.Partitions {
		if p.Topic == topic && p.Partition == partition {
			return p.Epochs, true
		}
	}
	return nil, false
}

// waitEpochs waits until every running replica's replication-epochs.json
// holds want for topic's partition 0.
func waitEpochs(t *testing.T, ns []*node, topic string, want []epochEntry) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		bad := ""
		for _, n := range ns {
			if n.in == nil {
				continue
			}
			if got, _ := epochsOf(t, n, topic, 0); !slices.Equal(got, want) {
				bad = fmt.Sprintf("replica %d: %v, want %v", n.id, got, want)
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaderEpoch is the epoch a replica's status reports.
func leaderEpoch(t *testing.T, n *node) int32 {
	t.Helper()
	return int32(status(t, n)["epoch"].(float64))
}

// TestEpochsFile: every replica keeps <DataDir>/replication-epochs.json
// true: the first epoch of a topic, the epoch a new leader adds after a
// failover, on leader and followers alike. A follower whose partition has
// records but lost its epoch history discards and recopies it (nothing
// tells which of its records the leader has): it ends with the leader's
// history, not one that starts at its own log end.
func TestEpochsFile(t *testing.T) {
	ns, _ := failoverGroup(t)
	first := servingLeader(t, ns, 0, 60*time.Second)
	waitISR(t, first, []int{1, 2, 3}, 60*time.Second)
	cl := client(t, first.addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	const topic = "epochs"
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := produceCode(t, cl, first.id, topic, -1); code != 0 {
			t.Fatalf("produce: error %d", code)
		}
	}
	e1 := leaderEpoch(t, first)
	waitEpochs(t, ns, topic, []epochEntry{{e1, 0}})

	first.stop()
	second := servingLeader(t, ns, first.id, 60*time.Second)
	e2 := leaderEpoch(t, second)
	cl2 := client(t, second.addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if code := produceCode(t, cl2, second.id, topic, -1); code != 0 {
		t.Fatalf("produce on the new leader: error %d", code)
	}
	first.start(t, &testLog{t: t, done: true})
	waitEpochs(t, ns, topic, []epochEntry{{e1, 0}, {e2, 3}})

	// A follower loses the epoch history of a partition that has records.
	var f *node
	for _, n := range ns {
		if n != second {
			f = n
			break
		}
	}
	f.stop()
	if err := os.Remove(filepath.Join(f.cfg.DataDir, "topics", topic, "0", "leader-epoch-checkpoint.json")); err != nil {
		t.Fatalf("the partition's own epoch history is not where expected: %v", err)
	}
	f.start(t, &testLog{t: t, done: true})
	if code := produceCode(t, cl2, second.id, topic, -1); code != 0 {
		t.Fatalf("produce after the follower restarted: error %d", code)
	}
	waitEpochs(t, ns, topic, []epochEntry{{e1, 0}, {e2, 3}})
	want, wantEnd, _ := second.in.Broker.ReadLog(topic, 0)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, gotEnd, err := f.in.Broker.ReadLog(topic, 0)
		if err == nil && gotEnd == wantEnd && string(got) == string(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d did not recopy the partition: end %d vs %d (%v)", f.id, gotEnd, wantEnd, err)
		}
		time.Sleep(50 * time.Millisecond)
		want, wantEnd, _ = second.in.Broker.ReadLog(topic, 0)
	}
}
