package broker

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// replicationCollector exports the replication status as Prometheus
// metrics, computed at scrape time from the same object /replication/status
// serves, so the two never disagree.
type replicationCollector struct {
	r *replica

	leader, epoch, isrSize, term  *prometheus.Desc
	inISR, lagRecords, lagSeconds *prometheus.Desc
	forwards                      *prometheus.Desc
	// The metadata log, in cluster mode.
	metaLeader, metaApplied, metaFailed *prometheus.Desc
}

func newReplicationCollector(r *replica) *replicationCollector {
	return &replicationCollector{
		r:           r,
		leader:      prometheus.NewDesc("moonmq_replication_leader", "1 while this replica is the serving leader, else 0.", nil, nil),
		epoch:       prometheus.NewDesc("moonmq_replication_epoch", "Current leader epoch.", nil, nil),
		isrSize:     prometheus.NewDesc("moonmq_replication_isr_size", "Replicas in the committed in-sync set.", nil, nil),
		term:        prometheus.NewDesc("moonmq_replication_raft_term", "Raft term (failover mode).", nil, nil),
		inISR:       prometheus.NewDesc("moonmq_replication_follower_in_isr", "1 if the follower is in the in-sync set (leader only).", []string{"follower"}, nil),
		lagRecords:  prometheus.NewDesc("moonmq_replication_follower_lag_records", "Records the follower lacks over all partitions (leader only).", []string{"follower"}, nil),
		lagSeconds:  prometheus.NewDesc("moonmq_replication_follower_last_fetch_seconds", "Seconds since the follower's last fetch (leader only).", []string{"follower"}, nil),
		forwards:    prometheus.NewDesc("moonmq_replication_forwarded_requests_total", "Client requests this replica forwarded to the leader, by result (relayed: the leader's answer; failed: a retriable error answered instead).", []string{"result"}, nil),
		metaLeader:  prometheus.NewDesc("moonmq_metadata_leader", "Cluster mode: the metadata log's leader as this broker knows it (-1: none).", nil, nil),
		metaApplied: prometheus.NewDesc("moonmq_metadata_applied_index", "Cluster mode: the metadata log index this broker's copy has applied (a copy that stops rising while others rise is stale).", nil, nil),
		metaFailed:  prometheus.NewDesc("moonmq_metadata_failed", "Cluster mode: 1 if this broker's metadata node stopped on a storage error (restart the broker once the disk is fixed).", nil, nil),
	}
}

func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.epoch, c.isrSize, c.term, c.inISR, c.lagRecords, c.lagSeconds, c.forwards, c.metaLeader, c.metaApplied, c.metaFailed} {
		ch <- d
	}
}

func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.status()
	lead := 0.0
	if st.Role == "leader" {
		lead = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, lead)
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(st.Epoch))
	ch <- prometheus.MustNewConstMetric(c.isrSize, prometheus.GaugeValue, float64(len(st.ISR)))
	ch <- prometheus.MustNewConstMetric(c.forwards, prometheus.CounterValue, float64(c.r.fwdDone.Load()), "relayed")
	ch <- prometheus.MustNewConstMetric(c.forwards, prometheus.CounterValue, float64(c.r.fwdFailed.Load()), "failed")
	if st.Raft != nil {
		ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(st.Raft.RaftTerm))
	}
	if m := st.Metadata; m != nil {
		failed := 0.0
		if m.Error != "" {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(c.metaLeader, prometheus.GaugeValue, float64(m.Leader))
		ch <- prometheus.MustNewConstMetric(c.metaApplied, prometheus.GaugeValue, float64(m.Applied))
		ch <- prometheus.MustNewConstMetric(c.metaFailed, prometheus.GaugeValue, failed)
	}
	isr := map[string]bool{}
	for _, id := range st.ISR {
		isr[strconv.Itoa(int(id))] = true
	}
	now := time.Now()
	for id, f := range st.Followers {
		in := 0.0
		if isr[id] {
			in = 1
		}
		ch <- prometheus.MustNewConstMetric(c.inISR, prometheus.GaugeValue, in, id)
		if f.Lag != nil {
			ch <- prometheus.MustNewConstMetric(c.lagRecords, prometheus.GaugeValue, float64(*f.Lag), id)
		}
		if !f.LastFetch.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, now.Sub(f.LastFetch).Seconds(), id)
		}
	}
}

// Ready reports what /health/ready answers: a single node is ready once
// started; a replica is ready while it serves clients as the leader, or
// as a follower while it is in the in-sync set (so a rolling restart waits
// for each replica to catch up before taking down the next one). Neither
// is ready while its disk is full.
func (b *Broker) Ready() bool {
	ok, _ := b.Readiness()
	return ok
}

// Readiness is Ready with the reason when not ready.
func (b *Broker) Readiness() (bool, string) {
	if b.disk != nil && b.disk.Full() {
		st := b.disk.Status()
		return false, fmt.Sprintf("disk full (%d bytes free on the data directory's volume): appends are refused, reads are served", st.FreeBytes)
	}
	r := b.repl
	if r == nil {
		return true, ""
	}
	if r.role.serving() {
		return true, ""
	}
	if slices.Contains(r.groupISR(), r.self) {
		return true, ""
	}
	return false, "a follower outside the in-sync replicas (catching up, or cut off from its leader)"
}
