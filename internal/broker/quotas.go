package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

// newQuotas applies Server.Quotas; nil means no quotas.
func newQuotas(c *config.Quotas) *auth.Quotas {
	if c == nil {
		return nil
	}
	per := map[string]auth.ByteRates{}
	for p, pq := range c.Principals {
		per[p] = auth.ByteRates(pq)
	}
	return auth.NewQuotas(auth.ByteRates{ProducerByteRate: c.ProducerByteRate, ConsumerByteRate: c.ConsumerByteRate}, per)
}

// produceBytes is what a produce counts against its quota: the record
// batches it carries.
func produceBytes(r *kmsg.ProduceRequest) int64 {
	var n int64
	for i := range r.Topics {
		for j := range r.Topics[i].Partitions {
			n += int64(len(r.Topics[i].Partitions[j].Records))
		}
	}
	return n
}

// throttle applies the quotas to a finished produce or fetch: the answer
// carries the throttle time (KIP-219) and the connection reads nothing more
// until it has passed.
func (cn *conn) throttle(req kmsg.Request, resp kmsg.Response) {
	q := cn.s.b.sec.quotas
	if q == nil {
		return
	}
	var kind auth.QuotaKind
	var n int64
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		kind, n = auth.ProduceQuota, produceBytes(r)
	case *kmsg.FetchRequest:
		kind, n = auth.FetchQuota, int64(recordBytes(resp))
	default:
		return
	}
	now := time.Now()
	d := q.Record(cn.aclPrincipal(), kind, n, now)
	if d <= 0 {
		return
	}
	if st, ok := resp.(kmsg.SetThrottleResponse); ok && resp != acks0Failed {
		st.SetThrottle(int32(d / time.Millisecond))
	}
	// On broker time: a wall reading stored as a number would, after
	// the wall clock was stepped back, keep the connection paused for
	// the length of the step.
	until := cn.s.b.clock.Now().Add(d).UnixNano()
	for {
		cur := cn.mutedUntil.Load()
		if cur >= until || cn.mutedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	cn.throttleLog(kind, d)
}

// throttleLog logs the first throttle of a connection per kind: enough to
// see who is throttled without a line per request.
func (cn *conn) throttleLog(kind auth.QuotaKind, d time.Duration) {
	if cn.throttled[kind].CompareAndSwap(false, true) {
		// No client id here: this may run on a handler's goroutine
		// while the reader still sets it.
		cn.log.Info("client throttled by its byte-rate quota", "principal", cn.aclPrincipal(), "kind", kind.String(),
			"throttle", d, "quota_bytes_per_second", cn.s.b.sec.quotas.Limit(cn.aclPrincipal(), kind))
	}
}

// waitMuted pauses the reader while the connection is throttled; it
// returns false if the connection ended meanwhile.
func (cn *conn) waitMuted() bool {
	until := cn.mutedUntil.Load()
	if until == 0 {
		return true
	}
	d := time.Duration(until - cn.s.b.clock.Now().UnixNano())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-cn.ctx.Done():
		return false
	}
}
