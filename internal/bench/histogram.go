package bench

import (
	"math"
	"math/bits"
	"sort"
	"sync/atomic"
	"time"
)

// The latency histogram is log-linear: values below 2^histSubBits
// nanoseconds get a bucket each, and every power of two above that is split
// into 2^histSubBits equal buckets, so any recorded value is reported with a
// relative error below 2^-histSubBits (under 1% with 7 bits).
const (
	histSubBits    = 7
	histSubBuckets = 1 << histSubBits
	histBuckets    = (64 - histSubBits + 1) * histSubBuckets
)

// Histogram is a fixed-memory, lock-free latency histogram safe for
// concurrent Record calls. Its zero value is ready to use; it is large
// (about 60 KiB), so allocate it with new rather than copying it.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	total  atomic.Uint64
	max    atomic.Int64
}

// bucketOf returns the bucket index of a value in nanoseconds.
func bucketOf(v uint64) int {
	if v < histSubBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [2^subBits, 2^(subBits+1))
	return (shift+1)*histSubBuckets + int(v>>uint(shift)) - histSubBuckets
}

// bucketRange returns the smallest and largest value mapping to bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < histSubBuckets {
		return uint64(i), uint64(i)
	}
	shift := uint(i/histSubBuckets - 1)
	sub := uint64(i%histSubBuckets + histSubBuckets)
	lo = sub << shift
	return lo, lo + (1 << shift) - 1
}

// Record adds one latency sample. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))].Add(1)
	h.total.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// Count returns the number of recorded samples.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest recorded sample.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the latency at percentile p (0 < p <= 100) using the
// nearest-rank definition: the smallest value such that at least p% of the
// samples are less than or equal to it. The value returned is the midpoint of
// the sample's bucket (clamped to the maximum seen). It returns 0 without
// samples.
func (h *Histogram) Quantile(p float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := nearestRank(p, int(n))
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= uint64(rank) {
			lo, hi := bucketRange(i)
			mid := time.Duration(lo + (hi-lo)/2)
			return min(mid, h.Max())
		}
	}
	return h.Max()
}

// nearestRank returns the 1-based rank of percentile p among n samples.
func nearestRank(p float64, n int) int {
	rank := int(math.Ceil(p / 100 * float64(n)))
	return min(max(rank, 1), n)
}

// Percentile returns the exact nearest-rank percentile p of samples, which
// it sorts in place. It returns 0 for no samples. It serves as the reference
// the histogram is checked against and for small sample sets.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	return samples[nearestRank(p, len(samples))-1]
}
