package stoatflow

import (
	"strings"
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
	dropped        *prometheus.CounterVec   // task counters named dropped-<reason>
	counters       *prometheus.CounterVec   // every other task counter
	pending        map[string]*atomic.Int64 // per store: writes not yet committed

	haRole       prometheus.Gauge
	haLagRecords prometheus.Gauge
	haLagMs      prometheus.Gauge
	haFailovers  prometheus.Counter
	haHandoffs   prometheus.Counter
	haPhase      *prometheus.HistogramVec
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
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stoatflow_dropped_records_total", Help: "Records a processor dropped, per reason: late (after its window's end plus grace), null (no key or value to aggregate), null-key (a table record without a key), ... (reprocessing after an abort counts again)."}, []string{"reason"})
	m.counters = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stoatflow_processor_counter_total", Help: "Counters that processors add to (ProcessorContext.Counter), per name, summed over tasks."}, []string{"name"})
	m.haRole = prometheus.NewGauge(prometheus.GaugeOpts{Name: "stoatflow_ha_role", Help: "1 on the active pod, 0 on a standby."})
	m.haLagRecords = prometheus.NewGauge(prometheus.GaugeOpts{Name: "stoatflow_ha_replication_lag_records", Help: "Committed changelog records this standby has not applied yet."})
	m.haLagMs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "stoatflow_ha_replication_lag_ms", Help: "Age of the oldest change this standby has not applied yet."})
	m.haFailovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_ha_promotions_total", Help: "Promotions of this pod to active (failovers, handoffs and the first election)."})
	m.haHandoffs = prometheus.NewCounter(prometheus.CounterOpts{Name: "stoatflow_ha_handoffs_total", Help: "Graceful handoffs this pod made as the active."})
	m.haPhase = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stoatflow_ha_promotion_phase_seconds", Help: "Duration of each promotion phase: elect (claim to promotion), fence_drain (fence and drain to the changelog's end), first_commit (promotion to the first commit).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"phase"})
	if a.cfg.HA.Mode == "active-standby" {
		m.reg.MustRegister(m.haRole, m.haLagRecords, m.haLagMs, m.haFailovers, m.haHandoffs, m.haPhase)
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_ha_peers", Help: "Other pods of the application heard from within failure detection."},
			func() float64 { return float64(a.haPeers()) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_ha_redundancy_below_desired", Help: "1 when fewer caught-up standbys than ha.desired-standbys exist."},
			func() float64 {
				if a.haBelowDesired() {
					return 1
				}
				return 0
			}))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stoatflow_ha_restart_required", Help: "1 when a source topic's partition count changed and the pod must restart (its liveness fails)."},
		func() float64 {
			if a.restartRequired.Load() != nil {
				return 1
			}
			return 0
		}))
	m.reg.MustRegister(m.recordsIn, m.recordsOut, m.processLatency, m.commitLatency, m.commits, m.aborts, m.checkpoints, m.restored, m.dropped, m.counters)
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

// countTask adds n to the metric behind a task counter: one named
// "dropped-<reason>" is stoatflow_dropped_records_total{reason}, any other
// stoatflow_processor_counter_total{name}. A Prometheus counter only
// grows, so a negative n reaches the task's own counter only.
func (m *metrics) countTask(name string, n int64) {
	if n <= 0 {
		return
	}
	if reason, ok := strings.CutPrefix(name, "dropped-"); ok {
		m.dropped.WithLabelValues(reason).Add(float64(n))
		return
	}
	m.counters.WithLabelValues(name).Add(float64(n))
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
