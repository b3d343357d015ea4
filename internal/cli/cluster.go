package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ClusterUsage is the usage text of `moonmq cluster`.
const ClusterUsage = `usage: moonmq cluster status [--bootstrap HOST:PORT[,HOST:PORT...]] [--config FILE]

status prints, from any broker's Metadata, a cluster's replication groups
(docs/CLUSTER.md: each broker's group is its rack), each group's leader,
leader epoch, ISR and brokers, and each partition's owner group, leader,
high watermark and lag:
  Cluster: demo Controller: 1 Brokers: 6 Groups: 2
  Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 Brokers: 1=127.0.0.1:9092,2=...,3=...
  Partition: events/0 Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 HighWatermark: 42 Lag: 2=0,3=1170
Lag is how many bytes each other broker of the owner group holds less of
the partition than its leader, from every broker's DescribeLogDirs (read
one broker after another, so it is approximate; "?" for a broker that did
not answer). A partition that no live group leads prints Leader: none.
Moves are not built yet, so none is shown. The brokers come from
--bootstrap, else from --config, else 127.0.0.1:9092.
`

// Cluster runs `moonmq cluster`.
func Cluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ClusterUsage)
		return 2
	}
	switch args[0] {
	case "status":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, ClusterUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "moonmq cluster: unknown subcommand %q\n%s", args[0], ClusterUsage)
		return 2
	}
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	if code := parseAdmin(fs, args[1:]); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "moonmq cluster status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	adm, seeds, ok := af.client("moonmq cluster", stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, *af.timeout)
	defer cancel()
	md, err := adm.Metadata(ctx)
	if err != nil {
		af.noBroker("moonmq cluster", stderr, seeds, err)
		return 1
	}
	var names []string
	for _, td := range md.Topics.Sorted() {
		if td.Err == nil && !td.IsInternal {
			names = append(names, td.Topic)
		}
	}
	var ends kadm.ListedOffsets
	if len(names) > 0 {
		ends, _ = adm.ListEndOffsets(ctx, names...)
	}
	// A broker that does not answer leaves its sizes out: its lag
	// prints as unknown.
	dirs, _ := adm.DescribeAllLogDirs(ctx, nil)
	FormatCluster(stdout, md, ends, logSizes(dirs))
	return 0
}

// LogSizes is the size of each broker's copy of each partition, by broker,
// topic and partition, as DescribeLogDirs reports it.
type LogSizes map[int32]map[string]map[int32]int64

// logSizes collects the sizes of every answer in dirs.
func logSizes(dirs kadm.DescribedAllLogDirs) LogSizes {
	out := LogSizes{}
	dirs.Each(func(d kadm.DescribedLogDir) {
		if d.Err != nil {
			return
		}
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if out[d.Broker] == nil {
				out[d.Broker] = map[string]map[int32]int64{}
			}
			if out[d.Broker][p.Topic] == nil {
				out[d.Broker][p.Topic] = map[int32]int64{}
			}
			out[d.Broker][p.Topic][p.Partition] += p.Size
		})
	})
	return out
}

// size is broker's size of a partition, false when it did not report one.
func (s LogSizes) size(broker int32, topic string, partition int32) (int64, bool) {
	n, ok := s[broker][topic][partition]
	return n, ok
}

// lag is the Lag field of a partition's line: each other replica's bytes
// behind the leader's copy.
func (s LogSizes) lag(topic string, p kadm.PartitionDetail) string {
	lead, ok := s.size(p.Leader, topic, p.Partition)
	if p.Leader < 0 || !ok {
		return "unknown"
	}
	var parts []string
	for _, r := range p.Replicas {
		if r == p.Leader {
			continue
		}
		n, ok := s.size(r, topic, p.Partition)
		if !ok {
			parts = append(parts, fmt.Sprintf("%d=?", r))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d=%d", r, max(lead-n, 0)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// groupOf names a broker's group: its rack, which a broker in cluster
// mode sets to its Cluster.GroupId ("-" outside cluster mode).
func groupOf(b kadm.BrokerDetail) string {
	if b.Rack == nil || *b.Rack == "" {
		return "-"
	}
	return *b.Rack
}

// FormatCluster prints md as `cluster status` does, with the high
// watermarks from ends and the lag from sizes.
func FormatCluster(w io.Writer, md kadm.Metadata, ends kadm.ListedOffsets, sizes LogSizes) {
	groups := map[string][]kadm.BrokerDetail{}
	groupOfID := map[int32]string{}
	for _, b := range md.Brokers {
		g := groupOf(b)
		groups[g] = append(groups[g], b)
		groupOfID[b.NodeID] = g
	}
	fmt.Fprintf(w, "Cluster: %s Controller: %d Brokers: %d Groups: %d\n", md.Cluster, md.Controller, len(md.Brokers), len(groups))
	type lead struct {
		leader, epoch int32
		isr           []int32
	}
	leads := map[string]lead{}
	type partLine struct {
		topic string
		p     kadm.PartitionDetail
	}
	var parts []partLine
	for _, td := range md.Topics.Sorted() {
		if td.Err != nil {
			continue
		}
		for _, p := range td.Partitions.Sorted() {
			// The internal topics name the groups' leaders too (every
			// group owns some of the coordinators' partitions), but
			// their partitions are not listed.
			if !td.IsInternal {
				parts = append(parts, partLine{td.Topic, p})
			}
			if g, ok := groupOfID[p.Leader]; ok && p.LeaderEpoch >= leads[g].epoch {
				leads[g] = lead{p.Leader, p.LeaderEpoch, p.ISR}
			}
		}
	}
	for _, g := range slices.Sorted(func(yield func(string) bool) {
		for g := range groups {
			if !yield(g) {
				return
			}
		}
	}) {
		bs := groups[g]
		slices.SortFunc(bs, func(a, b kadm.BrokerDetail) int { return int(a.NodeID - b.NodeID) })
		var list []string
		for _, b := range bs {
			list = append(list, fmt.Sprintf("%d=%s:%d", b.NodeID, b.Host, b.Port))
		}
		l, ok := leads[g]
		leader := "unknown"
		if ok {
			leader = fmt.Sprintf("%d Epoch: %d Isr: %s", l.leader, l.epoch, ids(l.isr))
		}
		fmt.Fprintf(w, "Group: %s Leader: %s Brokers: %s\n", g, leader, strings.Join(list, ","))
	}
	for _, pl := range parts {
		p := pl.p
		owner, leader := "unknown", "none"
		if p.Leader >= 0 {
			leader = fmt.Sprint(p.Leader)
		}
		if len(p.Replicas) > 0 {
			owner = groupOfID[p.Replicas[0]]
		}
		hw := "unknown"
		if o, ok := ends.Lookup(pl.topic, p.Partition); ok && o.Err == nil {
			hw = fmt.Sprint(o.Offset)
		}
		fmt.Fprintf(w, "Partition: %s/%d Group: %s Leader: %s Epoch: %d Isr: %s HighWatermark: %s Lag: %s\n",
			pl.topic, p.Partition, owner, leader, p.LeaderEpoch, ids(p.ISR), hw, sizes.lag(pl.topic, p))
	}
}
