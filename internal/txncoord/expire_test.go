package txncoord

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/txn"
)

// TestExpireIDsConcurrentPasses runs passes at once over the same idle
// ids: each locks a batch of entries before its durable write, so passes
// that took them in different orders would deadlock. Every id must be
// expired exactly once.
func TestExpireIDsConcurrentPasses(t *testing.T) {
	h := newTestHost(t)
	c := h.coordinator(context.Background())
	const ids = 200
	for i := range ids {
		id := fmt.Sprintf("tx-%03d", i)
		c.install(c.entry(id, true), &txn.Metadata{ID: id, ProducerID: int64(i),
			State: kmsg.TransactionStateCompleteCommit, Partitions: map[txn.TP]struct{}{}, UpdateMs: 1})
	}
	const passes = 8
	done := make(chan int, passes)
	for range passes {
		go func() { done <- c.ExpireIDs(context.Background(), time.Now()) }()
	}
	total := 0
	for range passes {
		select {
		case n := <-done:
			total += n
		case <-time.After(30 * time.Second):
			t.Fatal("concurrent expiry passes deadlocked")
		}
	}
	if total != ids {
		t.Fatalf("expired %d ids in all, want %d (each exactly once)", total, ids)
	}
	c.mu.Lock()
	left := len(c.byID)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d ids left", left)
	}
	if n := h.expired.Load(); n != ids {
		t.Fatalf("host counted %d expired ids, want %d", n, ids)
	}
}
