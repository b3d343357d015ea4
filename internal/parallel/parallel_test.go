package parallel

import (
	"sync"
	"testing"
	"time"
)

func TestEachBoundsAndCovers(t *testing.T) {
	var mu sync.Mutex
	now, peak := 0, 0
	seen := map[int]int{}
	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	Each(items, 4, func(i int) {
		mu.Lock()
		now++
		peak = max(peak, now)
		seen[i]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		now--
		mu.Unlock()
	})
	if len(seen) != len(items) {
		t.Fatalf("%d items called, want %d", len(seen), len(items))
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("item %d called %d times", i, n)
		}
	}
	if peak < 2 || peak > 4 {
		t.Fatalf("%d calls at once, want between 2 and 4", peak)
	}
}
