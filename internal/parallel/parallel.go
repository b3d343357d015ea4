// Package parallel runs a function over many items on a bounded number of
// goroutines, for the places that sync or persist many partitions' files
// at once (a disk completes concurrent syncs together, one after another
// each pays a round of its own). It knows nothing of MoonMQ and must not
// import its packages.
package parallel

import "sync"

// Each calls fn for every item, at most limit at once, and returns when
// all calls have returned.
func Each[T any](items []T, limit int, fn func(T)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(it)
		})
	}
	wg.Wait()
}
