package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompactedTopic produces many updates of few keys (and a tombstone) to
// a compact topic with small segments, runs the cleaner, and checks that a
// full read gives fewer records and, per key, the latest value (nothing for
// the deleted key once its tombstone expired).
func TestCompactedTopic(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "cmp", 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("4096"),
		"delete.retention.ms": kadm.StringPtr("0"),
	})
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("cmp"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	latest := map[string]string{}
	send := func(key string, value []byte) {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Key: []byte(key), Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const n = 600
	send("gone", []byte("soon deleted"))
	for i := 0; i < n; i++ {
		k, v := fmt.Sprint("k", i%10), fmt.Sprint("v", i)
		send(k, []byte(v))
		latest[k] = v
		if i == n/2 {
			send("gone", nil) // tombstone, expired at once (delete.retention.ms 0)
		}
	}
	// Many more records of other keys so the tombstone's segment closes.
	for i := 0; i < 200; i++ {
		k, v := fmt.Sprint("z", i%5), fmt.Sprint("w", i)
		send(k, []byte(v))
		latest[k] = v
	}
	in.Broker.EnforceRetention(time.Now().Add(time.Second))

	ends, _ := kadm.NewClient(client(t, in.Addr())).ListEndOffsets(ctxT(t), "cmp")
	end, _ := ends.Lookup("cmp", 0)
	got := map[string]string{}
	count := 0
	last := int64(-1)
	rd := client(t, in.Addr(), kgo.ConsumeTopics("cmp"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for last < end.Offset-1 {
		fs := rd.PollFetches(ctxT(t))
		if err := ctxT(t).Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Fatalf("offset %d after %d", r.Offset, last)
			}
			last = r.Offset
			count++
			if r.Value == nil {
				delete(got, string(r.Key))
			} else {
				got[string(r.Key)] = string(r.Value)
			}
		})
	}
	if count >= n+202 {
		t.Fatalf("compaction removed nothing: %d records read", count)
	}
	for k, v := range latest {
		if got[k] != v {
			t.Fatalf("key %s: read %q, latest written %q", k, got[k], v)
		}
	}
	if len(got) != len(latest) {
		t.Fatalf("read %d keys, want %d (the deleted key must be gone): %v", len(got), len(latest), got["gone"])
	}
	t.Logf("%d records written, %d read after compaction", n+202, count)
}
