package stoatflow

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is what /metrics exports, on a registry of the App's own (an
// application may run its own registry beside it).
type metrics struct {
	reg            *prometheus.Registry
	recordsIn      *prometheus.CounterVec
	recordsOut     *prometheus.CounterVec
	processLatency prometheus.Histogram
	commitLatency  prometheus.Histogram
	commits        prometheus.Counter
	aborts         prometheus.Counter
	checkpoints    prometheus.Counter
	restored       prometheus.Counter
	pending        map[string]*atomic.Int64 // per store: writes not yet committed
}

func newMetrics(a *App) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), pending: map[string]*atomic.Int64{}}
	for name := range a.topo.stores {
		m.pending[name] = new(atomic.Int64)
	}
	m.recordsIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stoatflow_records_in_total", Help: "Input records processed, per topic (reprocessing after an abort counts again)."}, []string{"topic"})
	m.recordsOut = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stoatflow_records_out_total", Help: "Records produced to sink and repartition topics, per topic."}, []string{"topic"})
	m.processLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stoatflow_process_latency_seconds", Help: "Time to process one input record through the topology.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)})
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stoatflow_commit_latency_seconds", Help: "Time of one commit: changelog writes, flush, offsets, end of transaction, local apply.", Buckets: prometheus.ExponentialBuckets(1e-4, 3, 12)})
	m.commits = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_commits_total", Help: "Commits that succeeded."})
	m.aborts = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_aborts_total", Help: "Commits that failed and were aborted; processing resumed from the last commit."})
	m.checkpoints = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_checkpoints_total", Help: "Flushes of the local stores with their changelog offsets."})
	m.restored = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_restored_records_total", Help: "Changelog records applied while restoring."})
	m.reg.MustRegister(m.recordsIn, m.recordsOut, m.processLatency, m.commitLatency, m.commits, m.aborts, m.checkpoints, m.restored)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_restore_remaining_records", Help: "Changelog records still to restore before processing starts."},
		func() float64 { return float64(a.restore.total.Load() - a.restore.done.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_ready", Help: "1 once the stores are restored and processing runs."},
		func() float64 {
			if a.ready.Load() {
				return 1
			}
			return 0
		}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_state_disk_bytes", Help: "Size of the on-disk state engine."},
		func() float64 {
			if d := a.disk; d != nil && a.ready.Load() {
				return float64(d.DiskUsage())
			}
			return 0
		}))
	pendingDesc := prometheus.NewDesc("stoatflow_store_pending_writes", "Writes to a store processed but not yet committed (the lag of interactive queries behind processing).", []string{"store"}, nil)
	m.reg.MustRegister(collectorFunc{desc: pendingDesc, collect: func(ch chan<- prometheus.Metric) {
		for name, c := range m.pending {
			ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(c.Load()), name)
		}
	}})
	return m
}

func (m *metrics) pendingWrites(store string) int64 {
	if c := m.pending[store]; c != nil {
		return c.Load()
	}
	return 0
}

func (m *metrics) resetPending() {
	for _, c := range m.pending {
		c.Store(0)
	}
}

type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
