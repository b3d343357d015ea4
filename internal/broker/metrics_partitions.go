package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// partitionCollector exports per-partition log figures and consumer-group
// lag, computed at scrape time from the broker's state (no bookkeeping on
// the produce or fetch path).
type partitionCollector struct {
	b *Broker

	start, end, hw, size, lag *prometheus.Desc
	// In cluster mode only: the owner group, its leader and ISR size.
	owner, leader, isr *prometheus.Desc
}

func newPartitionCollector(b *Broker) *partitionCollector {
	tp := []string{"topic", "partition"}
	return &partitionCollector{
		b:     b,
		start: prometheus.NewDesc("moonmq_partition_log_start_offset", "First offset still in the partition's log.", tp, nil),
		end:   prometheus.NewDesc("moonmq_partition_log_end_offset", "Offset the next appended record gets.", tp, nil),
		hw:    prometheus.NewDesc("moonmq_partition_high_watermark", "Offset below which records are committed and served to consumers.", tp, nil),
		size:  prometheus.NewDesc("moonmq_partition_size_bytes", "Bytes of the partition's segments on disk.", tp, nil),
		lag: prometheus.NewDesc("moonmq_consumer_group_lag", "High watermark minus the group's committed offset (records not yet consumed).",
			[]string{"group", "topic", "partition"}, nil),
		owner: prometheus.NewDesc("moonmq_partition_owner_info", "Cluster mode: 1 for the replication group that owns the partition (local: whether it is this broker's).",
			[]string{"topic", "partition", "owner_group", "local"}, nil),
		leader: prometheus.NewDesc("moonmq_partition_leader", "Cluster mode: broker id of the owner group's leader, -1 while it has none.", tp, nil),
		isr:    prometheus.NewDesc("moonmq_partition_isr_size", "Cluster mode: in-sync brokers of the owner group.", tp, nil),
	}
}

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.start, c.end, c.hw, c.size, c.lag, c.owner, c.leader, c.isr} {
		ch <- d
	}
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	type tp struct {
		topic     string
		partition int32
	}
	hws := map[tp]int64{}
	var view *clusterView
	if c.b.cl != nil {
		view = c.b.cl.current()
	}
	for _, t := range c.b.sortedTopics() {
		for _, p := range t.partitions {
			idx := strconv.Itoa(int(p.Index))
			hw := p.HighWatermark()
			gauge(c.start, p.Log().StartOffset(), t.name, idx)
			gauge(c.end, p.Log().EndOffset(), t.name, idx)
			gauge(c.hw, hw, t.name, idx)
			gauge(c.size, p.Log().Size(), t.name, idx)
			hws[tp{t.name, p.Index}] = hw
			if view == nil {
				continue
			}
			if o, ok := c.b.cl.owner(view, t.name, p.Index); ok {
				gauge(c.owner, 1, t.name, idx, o.Group, strconv.FormatBool(o.Local))
				gauge(c.leader, int64(o.Leader), t.name, idx)
				gauge(c.isr, int64(len(o.ISR)), t.name, idx)
			}
		}
	}
	if c.b.following() {
		return // the leader's committed offsets are the ones that count
	}
	c.b.groups.EachCommitted(func(group, topic string, partition int32, offset int64) {
		if hw, ok := hws[tp{topic, partition}]; ok && offset >= 0 {
			gauge(c.lag, max(0, hw-offset), group, topic, strconv.Itoa(int(partition)))
		}
	})
}
