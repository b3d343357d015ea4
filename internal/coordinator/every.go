package coordinator

import (
	"context"
	"time"

	"github.com/moonmq/moonmq/internal/clock"
)

// Every calls fn with broker time (clk.Now) every interval until ctx ends:
// the shape of every periodic pass a coordinator (and the broker) runs.
// The ticker's own time is a wall reading, and the passes compare "now"
// with stored timestamps, where a stepped wall clock would expire things
// early.
func Every(ctx context.Context, clk *clock.Clock, interval time.Duration, fn func(time.Time)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn(clk.Now())
		}
	}
}
