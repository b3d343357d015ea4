package broker

import (
	"context"
	"time"
)

// clockStepReported is the smallest change of the wall clock against
// broker time that is logged: NTP's slewing stays far below it, a step or
// a resume from suspend does not.
const clockStepReported = time.Second

// watchClock reports, every second until ctx ends, how far the wall clock
// is from broker time (/stats, /metrics), and logs when that changed by a
// step. Nothing the broker decides follows the wall clock; the line tells
// an operator why timestamps the broker writes differ from the wall clock
// by as much.
func (b *Broker) watchClock(ctx context.Context) {
	last := b.clock.Skew()
	b.stats.clockSkew.Store(int64(last))
	b.every(ctx, time.Second, func(time.Time) {
		s := b.clock.Skew()
		b.stats.clockSkew.Store(int64(s))
		if d := s - last; d >= clockStepReported || d <= -clockStepReported {
			b.log.Warn("the wall clock moved against broker time; retention, expiry and timeouts keep to broker time, which only moves forward",
				"step", d.Round(time.Millisecond), "wall_minus_broker", s.Round(time.Millisecond))
			last = s
		}
	})
}
