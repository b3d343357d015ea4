package partition

import (
	"context"
	"errors"
	"time"
)

// Policy decides how far a partition's high watermark may go: what of its
// log is committed.
type Policy interface {
	// Committed returns the offset below which p's records are
	// committed, now that durable is p's durable end, or false when the
	// policy has nothing to say (a follower: its high watermark comes
	// from its leader, through Follow).
	Committed(p *Partition, durable int64) (int64, bool)
	// Held reports whether p's high watermark is held back whatever the
	// replicas report (fewer in sync than min.insync.replicas): a wait
	// for it ends at once instead of at its deadline.
	Held(p *Partition) bool
}

// Acker is implemented by a Policy under which an acks=all produce waits
// for more than the high watermark (static replication: for every
// follower to hold the records).
type Acker interface {
	Acked(p *Partition, offset int64) bool
}

// Durable is a single node's policy: what is fsynced is committed.
type Durable struct{}

func (Durable) Committed(_ *Partition, durable int64) (int64, bool) { return durable, true }
func (Durable) Held(*Partition) bool                                { return false }

// Why a wait for the high watermark ended without it covering the offset.
var (
	// ErrStoppedLeading: the fence says this replica no longer leads, so
	// its high watermark will not move again.
	ErrStoppedLeading = errors.New("this replica stopped leading")
	// ErrHeld: the policy holds the high watermark (below
	// min.insync.replicas).
	ErrHeld = errors.New("the high watermark is held: fewer in-sync replicas than min.insync.replicas")
	// ErrNotCommitted: the context ended first (its deadline, or the
	// connection or broker closing). The outcome is unknown: the records
	// may still be committed later.
	ErrNotCommitted = errors.New("not committed before the wait ended")
)

// HighWatermark is the offset below which the partition's records are
// committed and visible.
func (p *Partition) HighWatermark() int64 { return p.hw.Load() }

// storeHW is the one writer of the high watermark: it sets it to next(cur)
// and wakes the partition's waiters when it rose.
func (p *Partition) storeHW(next func(cur int64) int64) {
	for {
		cur := p.hw.Load()
		n := next(cur)
		if n == cur {
			return
		}
		if p.hw.CompareAndSwap(cur, n) {
			if n > cur {
				p.Wake()
			}
			return
		}
	}
}

// raise raises the high watermark to hw, never above limit (the durable
// end) and never down.
func (p *Partition) raise(hw, limit int64) {
	hw = min(hw, limit)
	p.storeHW(func(cur int64) int64 { return max(cur, hw) })
}

// synced is told by the flusher that the log is durable up to durable.
func (p *Partition) synced(durable int64) {
	if hw, ok := p.policy.Committed(p, durable); ok {
		p.raise(hw, durable)
	}
}

// Recommit raises the high watermark as far as the policy now allows: its
// inputs changed (a follower reported its position, the ISR changed, the
// clock moved).
func (p *Partition) Recommit() {
	durable := p.log.DurableEnd()
	if hw, ok := p.policy.Committed(p, durable); ok {
		p.raise(hw, durable)
	}
}

// Follow raises a follower's high watermark to its leader's, never above
// its own durable end.
func (p *Partition) Follow(leaderHW int64) { p.raise(leaderHW, p.log.DurableEnd()) }

// Wake tells everybody waiting on the partition (long-poll fetches,
// acknowledgements, followers) to look again.
func (p *Partition) Wake() {
	p.waitMu.Lock()
	for ch := range p.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	p.waitMu.Unlock()
}

// WaitUntil calls done now and after every wake-up of one of parts until
// it returns true, the timeout passes (0: no timeout) or ctx ends, and
// reports whether done returned true. The waiter is registered before the
// first call, so a wake-up between a check and the wait is not missed.
func WaitUntil(ctx context.Context, parts []*Partition, timeout time.Duration, done func() bool) bool {
	ch := make(chan struct{}, 1)
	for _, p := range parts {
		p.waitMu.Lock()
		p.waiters[ch] = struct{}{}
		p.waitMu.Unlock()
	}
	defer func() {
		for _, p := range parts {
			p.waitMu.Lock()
			delete(p.waiters, ch)
			p.waitMu.Unlock()
		}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	for {
		if done() {
			return true
		}
		select {
		case <-ch:
		case <-expired:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Wait is an offset of a partition that an acknowledgement waits for.
type Wait struct {
	P      *Partition
	Offset int64
	// Acks marks an acks=all produce: under an Acker policy it also
	// waits for what the Acker asks.
	Acks bool
}

// done reports whether w is committed (and acknowledged, for Acks).
func (w Wait) done() bool {
	if w.P.hw.Load() < w.Offset {
		return false
	}
	if a, ok := w.P.policy.(Acker); ok && w.Acks {
		return a.Acked(w.P, w.Offset)
	}
	return true
}

func (p *Partition) stoppedLeading() bool {
	_, err := p.fence.Leading()
	return err != nil
}

// WaitCommitted waits until everything below offset is committed, or ctx
// ends. It returns nil once it is; otherwise ErrStoppedLeading,
// ErrHeld (both end the wait at once) or ErrNotCommitted.
func (p *Partition) WaitCommitted(ctx context.Context, offset int64) error {
	return WaitAll(ctx, []Wait{{P: p, Offset: offset}})[0]
}

// WaitAll is WaitCommitted for several offsets at once: it returns when
// each is done or held, when a partition's replica stopped leading, or
// when ctx ends, and then gives for each wait nil or why it is not done.
// A wait must never be answered as a success without this last pass: the
// fault harness lost acknowledged records when a stopping leader's waits
// returned early on their closed context and were taken for successes.
func WaitAll(ctx context.Context, waits []Wait) []error {
	parts := make([]*Partition, len(waits))
	for i, w := range waits {
		parts[i] = w.P
	}
	WaitUntil(ctx, parts, 0, func() bool {
		for _, w := range waits {
			if w.P.stoppedLeading() {
				// Woken by the step-down: the high watermark will
				// not move again, and waiting out the deadline only
				// delays the answer and the shutdown waiting for it.
				return true
			}
		}
		for _, w := range waits {
			if !w.done() && !w.P.policy.Held(w.P) {
				return false
			}
		}
		return true
	})
	errs := make([]error, len(waits))
	for i, w := range waits {
		switch {
		case w.done():
		case w.P.stoppedLeading():
			errs[i] = ErrStoppedLeading
		case w.P.policy.Held(w.P):
			errs[i] = ErrHeld
		default:
			errs[i] = ErrNotCommitted
		}
	}
	return errs
}
