package broker

import (
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/status"
)

// Stats holds the broker's counters. They feed both the Prometheus registry
// and the /stats JSON, so the two never disagree.
type Stats struct {
	reg *prometheus.Registry

	connections atomic.Int64
	badFrames   atomic.Int64

	producedBytes   atomic.Int64
	producedRecords atomic.Int64
	fetchedBytes    atomic.Int64
	fetchedRecords  atomic.Int64
	requestCount    atomic.Int64

	// Expiry (Kafka's retention of consumer-group and producer state).
	expiredOffsets   atomic.Int64
	expiredGroups    atomic.Int64
	expiredProducers atomic.Int64
	expiredTxnIDs    atomic.Int64

	// clockSkew is the wall clock minus broker time, in nanoseconds
	// (clock.go).
	clockSkew atomic.Int64

	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	remote     *prometheus.HistogramVec
	fsyncHist  prometheus.Histogram
	fsyncCount atomic.Int64
	fsyncNanos atomic.Int64
}

func newStats() *Stats {
	s := &Stats{reg: prometheus.NewRegistry()}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "moonmq_requests_total", Help: "Requests answered, by API and Kafka error code (0 = none).",
	}, []string{"api", "error_code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "moonmq_request_duration_seconds", Help: "Time from decoding a request to its answer being ready.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"api"})
	// Kafka's RemoteTimeMs: the part of a request's time spent after its
	// handler returned, mostly waiting for something else (a group-commit
	// pass, followers, new data). Beside the fsync histogram it says
	// whether a slow acks=all produce waited for the disk or for CPU. An
	// EndTxn does all its work there, so its share is the whole request.
	s.remote = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "moonmq_request_remote_seconds",
		Help:    "Of moonmq_request_duration_seconds, the time after the handler's own work spent waiting: an acks=all produce for its group-commit pass (and its followers), a fetch for data; all of an EndTxn (its decision, markers and their pass).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"api"})
	s.fsyncHist = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "moonmq_fsync_duration_seconds", Help: "Latency of partition log syncs: a group-commit pass (one volume sync or each log's fsync), or a follower's sync of what it copied.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
	})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	s.reg.MustRegister(s.requests, s.latency, s.remote, s.fsyncHist,
		gauge("moonmq_connections", "Open client connections.", func() float64 { return float64(s.connections.Load()) }),
		counter("moonmq_bad_frames_total", "Connections closed for a frame that could not be accepted.", &s.badFrames),
		counter("moonmq_produced_bytes_total", "Record batch bytes appended.", &s.producedBytes),
		counter("moonmq_produced_records_total", "Records appended.", &s.producedRecords),
		counter("moonmq_fetched_bytes_total", "Record batch bytes returned to consumers.", &s.fetchedBytes),
		counter("moonmq_fetched_records_total", "Records returned to consumers (and followers' fetches through the Kafka port).", &s.fetchedRecords),
		counter("moonmq_expired_offsets_total", "Committed offsets deleted by offsets retention (OffsetsRetentionMinutes).", &s.expiredOffsets),
		counter("moonmq_expired_groups_total", "Empty groups without committed offsets deleted by offsets retention.", &s.expiredGroups),
		counter("moonmq_expired_producers_total", "Idle producers forgotten by a partition (ProducerIdExpirationMs), summed over partitions.", &s.expiredProducers),
		counter("moonmq_expired_transactional_ids_total", "Idle transactional ids deleted (TransactionalIdExpirationMs).", &s.expiredTxnIDs),
		gauge("moonmq_wall_clock_skew_seconds", "How far the wall clock is ahead of broker time (negative: behind), which retention and expiry use and which a step of the wall clock does not move.",
			func() float64 { return time.Duration(s.clockSkew.Load()).Seconds() }),
		prometheus.NewGoCollector(),
	)
	return s
}

func (s *Stats) request(key int16, code int16) {
	s.requests.WithLabelValues(kmsg.NameForKey(key), strconv.Itoa(int(code))).Inc()
}

func (s *Stats) finished(key int16, resp kmsg.Response, d time.Duration) {
	s.requestCount.Add(1)
	s.latency.WithLabelValues(kmsg.NameForKey(key)).Observe(d.Seconds())
	s.request(key, topLevelError(resp))
}

// waited records how long a request's deferred answer waited.
func (s *Stats) waited(key int16, d time.Duration) {
	s.remote.WithLabelValues(kmsg.NameForKey(key)).Observe(d.Seconds())
}

// topLevelError reports the first error code of a response, enough to see
// in metrics which APIs fail and how.
func topLevelError(resp kmsg.Response) int16 {
	switch r := resp.(type) {
	case nil:
		return 0
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return p.ErrorCode
				}
			}
		}
	case *kmsg.FetchResponse:
		if r.ErrorCode != 0 {
			return r.ErrorCode
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return p.ErrorCode
				}
			}
		}
	case *kmsg.ApiVersionsResponse:
		return r.ErrorCode
	}
	return 0
}

func (s *Stats) produced(bytes, records int64) {
	s.producedBytes.Add(bytes)
	s.producedRecords.Add(records)
}

func (s *Stats) fetched(n int, targets []fetchTarget) {
	s.fetchedBytes.Add(int64(n))
	var recs int64
	for _, t := range targets {
		recs += countRecords(t.out.RecordBatches)
	}
	s.fetchedRecords.Add(recs)
}

// countRecords sums the record counts of the batch headers in b (a fetch
// answer's record set), stopping at a partial batch.
func countRecords(b []byte) int64 {
	var n int64
	for len(b) >= 61 {
		size := 12 + int(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < 61 || size > len(b) {
			break
		}
		n += int64(int32(binary.BigEndian.Uint32(b[57:61])))
		b = b[size:]
	}
	return n
}

func (s *Stats) observeFsync(d time.Duration) {
	s.fsyncHist.Observe(d.Seconds())
	s.fsyncCount.Add(1)
	s.fsyncNanos.Add(int64(d))
}

// Registry is the Prometheus registry behind /metrics.
func (b *Broker) Registry() *prometheus.Registry { return b.stats.reg }

// Snapshot returns the current /stats document.
func (b *Broker) Snapshot() status.Stats {
	s := b.stats
	snap := status.Stats{
		NodeID: b.nodeID, ClusterID: b.clusterID, Role: "standalone",
		Connections: s.connections.Load(), Requests: s.requestCount.Load(), BadFrames: s.badFrames.Load(),
		ProducedBytes: s.producedBytes.Load(), ProducedRecords: s.producedRecords.Load(),
		FetchedBytes: s.fetchedBytes.Load(), Fsyncs: s.fsyncCount.Load(),
		Expired: status.Expired{Offsets: s.expiredOffsets.Load(), Groups: s.expiredGroups.Load(),
			Producers: s.expiredProducers.Load(), TransactionalIDs: s.expiredTxnIDs.Load()},
		Memory:          b.mem.snapshot(),
		SegmentFiles:    b.segmentFileStats(),
		Disk:            b.diskStats(),
		WallClockSkewMs: time.Duration(s.clockSkew.Load()).Milliseconds(),
	}
	if n := snap.Fsyncs; n > 0 {
		snap.FsyncAvgMicros = s.fsyncNanos.Load() / n / 1000
	}
	if b.repl != nil {
		st := b.repl.status()
		snap.Role, snap.Replication = st.Role, &st
	}
	ts := b.sortedTopics()
	snap.Topics = len(ts)
	snap.Partitions = []status.Partition{}
	var view *clusterView
	if b.cl != nil {
		view = b.cl.current()
	}
	for _, t := range ts {
		for _, p := range t.partitions {
			sp := status.Partition{
				Topic: t.name, Partition: p.Index, LogStartOffset: p.Log().StartOffset(),
				LogEndOffset: p.Log().EndOffset(), HighWatermark: p.HighWatermark(), SizeBytes: p.Log().Size(),
			}
			if view != nil {
				if o, ok := b.cl.owner(view, t.name, p.Index); ok {
					o.Fenced = placementOf(p).moved.Load()
					if o.Local && !o.Fenced && !b.following() && !b.fenced() {
						o.ServingEpoch = b.exposedEpoch(p)
					}
					sp.Owner = &o
				}
			}
			snap.Partitions = append(snap.Partitions, sp)
		}
	}
	return snap
}
