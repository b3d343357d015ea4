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
leader epoch, ISR and brokers, and each partition's owner group, leader
and high watermark:
  Cluster: demo Controller: 1 Brokers: 6 Groups: 2
  Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 Brokers: 1=127.0.0.1:9092,2=...,3=...
  Partition: events/0 Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 HighWatermark: 42
A partition that no live group leads prints Leader: none. Moves are not
built yet, so none is shown. The brokers come from --bootstrap, else from
--config, else 127.0.0.1:9092.
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
	FormatCluster(stdout, md, ends)
	return 0
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
// watermarks from ends.
func FormatCluster(w io.Writer, md kadm.Metadata, ends kadm.ListedOffsets) {
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
		if td.Err != nil || td.IsInternal {
			continue
		}
		for _, p := range td.Partitions.Sorted() {
			parts = append(parts, partLine{td.Topic, p})
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
		fmt.Fprintf(w, "Partition: %s/%d Group: %s Leader: %s Epoch: %d Isr: %s HighWatermark: %s\n",
			pl.topic, p.Partition, owner, leader, p.LeaderEpoch, ids(p.ISR), hw)
	}
}
