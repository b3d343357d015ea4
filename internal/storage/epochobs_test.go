package storage

import (
	"slices"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// TestEpochObserver: every durable change of the epoch history (a new
// epoch, a truncation, a trim from the start, a full reset) reaches the
// observer with the history as written; appends in the same epoch do not.
func TestEpochObserver(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	var seen [][]EpochEntry
	l.SetEpochObserver(func(h []EpochEntry) { seen = append(seen, h) })
	for _, ep := range []int32{1, 1, 3, 3} {
		if _, err := l.Append(mkBatch(t, 2, 0, 1), ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Truncate(4); err != nil { // drops epoch 3 (started at 4)
		t.Fatal(err)
	}
	if _, err := l.DeleteRecords(2); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateFullyAndStartAt(10); err != nil {
		t.Fatal(err)
	}
	want := [][]EpochEntry{
		{{1, 0}},
		{{1, 0}, {3, 4}},
		{{1, 0}},
		{{1, 2}},
		{},
	}
	if len(seen) != len(want) {
		t.Fatalf("observer saw %v, want %v", seen, want)
	}
	for i := range want {
		if !slices.Equal(seen[i], want[i]) {
			t.Fatalf("change %d: %v, want %v", i, seen[i], want[i])
		}
		if !slices.Equal(seen[len(seen)-1], l.EpochHistory()) {
			t.Fatalf("last seen %v, history %v", seen[len(seen)-1], l.EpochHistory())
		}
	}
}
