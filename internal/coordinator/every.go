package coordinator

import (
	"context"
	"time"
)

// Every calls fn with the tick's time every interval until ctx ends: the
// shape of every periodic pass a coordinator (and the broker) runs.
func Every(ctx context.Context, interval time.Duration, fn func(time.Time)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			fn(now)
		}
	}
}
