package broker

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
)

// Byte-rate quotas (KIP-13) measure a principal's rate over quotaSamples
// windows of quotaSampleLen, as Kafka does by default (11 x 1 s), and
// throttle by Kafka's formula: (rate - quota) / quota x the window, capped
// at the window so one burst cannot pause a client for minutes.
const (
	quotaSamples   = 11
	quotaSampleLen = time.Second
	quotaWindow    = quotaSamples * quotaSampleLen
)

type quotaKind int

const (
	produceQuota quotaKind = iota
	fetchQuota
)

func (k quotaKind) String() string {
	if k == produceQuota {
		return "produce"
	}
	return "fetch"
}

// quotas applies Server.Quotas; nil means no quotas.
type quotas struct {
	def [2]int64
	per map[string][2]int64

	mu      sync.Mutex
	sensors map[quotaSensorKey]*rateSensor
}

type quotaSensorKey struct {
	principal string
	kind      quotaKind
}

func newQuotas(c *config.Quotas) *quotas {
	if c == nil {
		return nil
	}
	q := &quotas{def: [2]int64{c.ProducerByteRate, c.ConsumerByteRate}, per: map[string][2]int64{}, sensors: map[quotaSensorKey]*rateSensor{}}
	for p, pq := range c.Principals {
		q.per[p] = [2]int64{pq.ProducerByteRate, pq.ConsumerByteRate}
	}
	return q
}

func (q *quotas) limit(principal string, kind quotaKind) int64 {
	if l, ok := q.per[principal]; ok {
		return l[kind]
	}
	return q.def[kind]
}

// record counts bytes a principal produced or fetched and returns how long
// to throttle it (0: within its quota).
func (q *quotas) record(principal string, kind quotaKind, bytes int64, now time.Time) time.Duration {
	limit := q.limit(principal, kind)
	if limit <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := quotaSensorKey{principal, kind}
	s := q.sensors[k]
	if s == nil {
		s = &rateSensor{}
		q.sensors[k] = s
	}
	rate := s.record(bytes, now)
	if rate <= float64(limit) {
		return 0
	}
	d := time.Duration((rate - float64(limit)) / float64(limit) * float64(quotaWindow))
	return min(d, quotaWindow)
}

// rateSensor is a rate over a ring of samples.
type rateSensor struct {
	starts [quotaSamples]time.Time
	bytes  [quotaSamples]int64
	cur    int
}

// record adds bytes at now and returns the rate in bytes per second over
// the samples still inside the window. Like Kafka, it divides by at least
// quotaSamples-1 sample lengths, so a fresh sensor does not report a huge
// rate for the first bytes.
func (s *rateSensor) record(bytes int64, now time.Time) float64 {
	if s.starts[s.cur].IsZero() || now.Sub(s.starts[s.cur]) >= quotaSampleLen {
		s.cur = (s.cur + 1) % quotaSamples
		s.starts[s.cur], s.bytes[s.cur] = now, 0
	}
	s.bytes[s.cur] += bytes
	var total int64
	oldest := now
	for i := range s.starts {
		if s.starts[i].IsZero() || now.Sub(s.starts[i]) >= quotaWindow {
			continue
		}
		total += s.bytes[i]
		if s.starts[i].Before(oldest) {
			oldest = s.starts[i]
		}
	}
	elapsed := max(now.Sub(oldest), (quotaSamples-1)*quotaSampleLen)
	return float64(total) / elapsed.Seconds()
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
	var kind quotaKind
	var n int64
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		kind, n = produceQuota, produceBytes(r)
	case *kmsg.FetchRequest:
		kind, n = fetchQuota, int64(recordBytes(resp))
	default:
		return
	}
	now := time.Now()
	d := q.record(cn.aclPrincipal(), kind, n, now)
	if d <= 0 {
		return
	}
	if st, ok := resp.(kmsg.SetThrottleResponse); ok && resp != acks0Failed {
		st.SetThrottle(int32(d / time.Millisecond))
	}
	until := now.Add(d).UnixNano()
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
func (cn *conn) throttleLog(kind quotaKind, d time.Duration) {
	if cn.throttled[kind].CompareAndSwap(false, true) {
		// No client id here: this may run on a handler's goroutine
		// while the reader still sets it.
		cn.log.Info("client throttled by its byte-rate quota", "principal", cn.aclPrincipal(), "kind", kind.String(),
			"throttle", d, "quota_bytes_per_second", cn.s.b.sec.quotas.limit(cn.aclPrincipal(), kind))
	}
}

// waitMuted pauses the reader while the connection is throttled; it
// returns false if the connection ended meanwhile.
func (cn *conn) waitMuted() bool {
	until := cn.mutedUntil.Load()
	if until == 0 {
		return true
	}
	d := time.Until(time.Unix(0, until))
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
