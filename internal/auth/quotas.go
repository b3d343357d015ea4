package auth

import (
	"sync"
	"time"
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

// QuotaKind is what a quota limits.
type QuotaKind int

// The kinds: produce counts the record batches a principal sends, fetch
// the ones it is sent.
const (
	ProduceQuota QuotaKind = iota
	FetchQuota
)

var quotaKindNames = [...]string{ProduceQuota: "produce", FetchQuota: "fetch"}

func (k QuotaKind) String() string { return quotaKindNames[k] }

// ByteRates are a principal's quotas in bytes per second; 0 is unlimited.
// The fields are config.Quota's, so one converts to the other.
type ByteRates struct {
	ProducerByteRate int64
	ConsumerByteRate int64
}

func (r ByteRates) of(kind QuotaKind) int64 {
	if kind == ProduceQuota {
		return r.ProducerByteRate
	}
	return r.ConsumerByteRate
}

// Quotas keeps every principal's rate sensors and decides its throttle.
// It is safe for concurrent use.
type Quotas struct {
	def ByteRates
	per map[string]ByteRates

	mu      sync.Mutex
	sensors map[quotaSensorKey]*rateSensor
}

type quotaSensorKey struct {
	principal string
	kind      QuotaKind
}

// NewQuotas applies def to every principal per does not name.
func NewQuotas(def ByteRates, per map[string]ByteRates) *Quotas {
	q := &Quotas{def: def, per: map[string]ByteRates{}, sensors: map[quotaSensorKey]*rateSensor{}}
	for p, r := range per {
		q.per[p] = r
	}
	return q
}

// Limit is a principal's quota in bytes per second, 0 for none.
func (q *Quotas) Limit(principal string, kind QuotaKind) int64 {
	if r, ok := q.per[principal]; ok {
		return r.of(kind)
	}
	return q.def.of(kind)
}

// Record counts bytes a principal produced or fetched and returns how long
// to throttle it (0: within its quota).
func (q *Quotas) Record(principal string, kind QuotaKind, bytes int64, now time.Time) time.Duration {
	limit := q.Limit(principal, kind)
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
