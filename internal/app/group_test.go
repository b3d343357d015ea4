package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupConsumersJoinAndLeave runs franz-go group consumers that join and
// leave while records flow, and checks that every record is consumed and
// that the group's committed offsets end at the log end.
func TestGroupConsumersJoinAndLeave(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "grp", 6, nil)
	const n = 600
	prod := client(t, in.Addr(), kgo.DefaultProduceTopic("grp"))
	produce := func(from, to int) { produceNumbers(t, prod, from, to) }
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	start := func(name string, stop <-chan struct{}) {
		cl := client(t, in.Addr(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("grp"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(name),
			kgo.AutoCommitInterval(100*time.Millisecond), kgo.SessionTimeout(6*time.Second))
		pollUntilStopped(ctx, &wg, cl, stop, &mu, seen)
	}
	stop1, stop2, stop3 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	start("c1", stop1)
	produce(0, n/3)
	start("c2", stop2)
	produce(n/3, 2*n/3)
	start("c3", stop3)
	time.Sleep(500 * time.Millisecond)
	close(stop2) // one member leaves mid-stream
	produce(2*n/3, n)
	waitDistinct(t, &mu, seen, n)
	close(stop1)
	close(stop3)
	wg.Wait()

	adm := kadm.NewClient(client(t, in.Addr()))
	committed, err := adm.FetchOffsets(ctxT(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	ends, _ := adm.ListEndOffsets(ctxT(t), "grp")
	ends.Each(func(e kadm.ListedOffset) {
		c, _ := committed.Lookup("grp", e.Partition)
		if c.At != e.Offset {
			t.Errorf("partition %d: committed %d, end %d", e.Partition, c.At, e.Offset)
		}
	})
	groups, err := adm.DescribeGroups(ctxT(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if g := groups["g"]; g.State != "Empty" {
		t.Fatalf("group state after everyone left: %q", g.State)
	}
	if _, err := adm.DeleteGroups(ctxT(t), "g"); err != nil {
		t.Fatal(err)
	}
	committed, _ = adm.FetchOffsets(ctxT(t), "g")
	if len(committed) != 0 {
		t.Fatalf("offsets survive DeleteGroups: %v", committed)
	}
}

// pollUntilStopped polls cl on a goroutine that wg tracks, counting every
// record's value in seen (under mu), until stop is closed (then it commits
// and closes the client, which leaves the group) or ctx ends.
func pollUntilStopped(ctx context.Context, wg *sync.WaitGroup, cl *kgo.Client, stop <-chan struct{}, mu *sync.Mutex, seen map[string]int) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				cl.CommitUncommittedOffsets(context.Background())
				cl.Close()
				return
			case <-ctx.Done():
				cl.Close()
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				seen[string(r.Value)]++
				mu.Unlock()
			})
		}
	}()
}

// waitDistinct waits until seen (under mu) holds n distinct values.
func waitDistinct(t *testing.T, mu *sync.Mutex, seen map[string]int, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group consumed %d distinct records of %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produceNumbers produces the values from..to-1 (as decimal strings, also
// the keys) and waits until all are acknowledged.
func produceNumbers(t *testing.T, prod *kgo.Client, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		prod.Produce(ctxT(t), &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := prod.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
