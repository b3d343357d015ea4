package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ClusterUsage is the usage text of `moonmq cluster`.
const ClusterUsage = `usage: moonmq cluster status [--bootstrap HOST:PORT[,HOST:PORT...]] [--config FILE]
       moonmq cluster move TOPIC/PARTITION GROUP [--wait] [--bootstrap ...] [--config FILE]
       moonmq cluster move --cancel TOPIC/PARTITION [--bootstrap ...] [--config FILE]
       moonmq cluster balance [--dry-run] [--sample D] [--max-concurrent N] [--bootstrap ...] [--config FILE]
       moonmq cluster drain GROUP [--dry-run] [--undo] [--sample D] [--max-concurrent N] [--bootstrap ...] [--config FILE]

status prints, from any broker's Metadata, a cluster's replication groups
(docs/CLUSTER.md: each broker's group is its rack), each group's leader,
leader epoch, ISR and brokers, and each partition's owner group, leader,
high watermark and lag, and the move under way if there is one:
  Cluster: demo Controller: 1 Brokers: 6 Groups: 2
  Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 Brokers: 1=127.0.0.1:9092,2=...,3=...
  Partition: events/0 Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 HighWatermark: 42 Lag: 2=0,3=1170
  Partition: events/1 Group: g1 Leader: 1 Epoch: 2 Isr: 1,2,3 HighWatermark: 40 Lag: 2=0,3=0 Moving: g1->g2
Lag is how many bytes each other broker of the owner group holds less of
the partition than its leader, from every broker's DescribeLogDirs (read
one broker after another, so it is approximate; "?" for a broker that did
not answer). A partition that no live group leads prints Leader: none.

move starts moving a partition to another replication group
(AlterPartitionReassignments with that group's brokers): the group copies
it, the owner fences it, and the new group serves it from the cut-over on.
--wait prints a progress line until the move is over. --cancel cancels a
move that is still copying.

balance moves user topics' partitions from the most loaded groups to the
least loaded until a move would no longer make them more even: a group
added to a running cluster takes its share. A partition's load is the
mean of its shares of the partitions, of their bytes (DescribeLogDirs)
and of the bytes appended to them per second, measured over --sample
(default 5s; 0 leaves rates out); with neither bytes nor writes the
groups' partition counts end at most one apart. It prints each move,
starts --max-concurrent (default 1) at a time and prints a progress line
until all are done; --dry-run only prints them. Partitions of the
coordinators' topics stay where they are, except on a draining group.
Then it hands every group led from elsewhere to its preferred replica,
the first Metadata lists (the brokers pick the preferred leaders so that
they spread over machines, Cluster.Machine), with ElectLeaders, as
kafka-leader-election --election-type PREFERRED would.

drain marks a group as draining (the cluster-wide broker config
moonmq.draining.groups, which kafka-configs --entity-type brokers
--entity-default also shows): it takes no new partition and no move.
Then it moves every partition the group owns, the coordinators' topics'
included, to the least loaded groups (--max-concurrent, default 4, at a
time; --sample, default 0, as for balance) until the group owns none; stop its brokers then to remove
it. --undo takes the mark off.

The brokers come from --bootstrap, else from --config, else
127.0.0.1:9092.
`

// Cluster runs `moonmq cluster`.
func Cluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ClusterUsage)
		return 2
	}
	switch args[0] {
	case "status":
		return clusterStatus(ctx, args[1:], stdout, stderr)
	case "move":
		return clusterMove(ctx, args[1:], stdout, stderr)
	case "balance":
		return clusterBalance(ctx, args[1:], stdout, stderr)
	case "drain":
		return clusterDrain(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, ClusterUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "moonmq cluster: unknown subcommand %q\n%s", args[0], ClusterUsage)
		return 2
	}
}

func clusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	if code := parseAdmin(fs, args); code >= 0 {
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
	var moves kadm.ListPartitionReassignmentsResponses
	if len(names) > 0 {
		ends, _ = adm.ListEndOffsets(ctx, names...)
		moves, _ = adm.ListPartitionReassignments(ctx, md.Topics.TopicsSet())
	}
	// A broker that does not answer leaves its sizes out: its lag
	// prints as unknown.
	dirs, _ := adm.DescribeAllLogDirs(ctx, nil)
	FormatCluster(stdout, md, ends, logSizes(dirs), moves)
	return 0
}

// clusterMove starts (or cancels) a partition's move to another group.
func clusterMove(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cluster move", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	wait := fs.Bool("wait", false, "wait until the move is over, with a progress line")
	cancelMove := fs.Bool("cancel", false, "cancel the partition's move (while it is still copying)")
	if code := parseAdmin(fs, interspersed(fs, args)); code >= 0 {
		return code
	}
	want := 2
	if *cancelMove {
		want = 1
	}
	if fs.NArg() != want {
		fmt.Fprintf(stderr, "moonmq cluster move: want TOPIC/PARTITION%s, got %q\n%s", map[bool]string{true: "", false: " GROUP"}[*cancelMove], fs.Args(), ClusterUsage)
		return 2
	}
	topic, partStr, okCut := strings.Cut(fs.Arg(0), "/")
	part, err := strconv.ParseInt(partStr, 10, 32)
	if !okCut || topic == "" || err != nil || part < 0 {
		fmt.Fprintf(stderr, "moonmq cluster move: %q is not TOPIC/PARTITION (for example events/0)\n", fs.Arg(0))
		return 2
	}
	adm, seeds, ok := af.client("moonmq cluster move", stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	rctx, cancel := context.WithTimeout(ctx, *af.timeout)
	defer cancel()
	md, err := adm.Metadata(rctx)
	if err != nil {
		af.noBroker("moonmq cluster move", stderr, seeds, err)
		return 1
	}
	var req kadm.AlterPartitionAssignmentsReq
	group := ""
	if *cancelMove {
		req.CancelAssign(topic, int32(part))
	} else {
		group = fs.Arg(1)
		var brokers []int32
		var known []string
		for _, b := range md.Brokers {
			g := groupOf(b)
			if g == group {
				brokers = append(brokers, b.NodeID)
			}
			if !slices.Contains(known, g) {
				known = append(known, g)
			}
		}
		if len(brokers) == 0 {
			slices.Sort(known)
			fmt.Fprintf(stderr, "moonmq cluster move: no live broker of group %q; the groups are %s\n", group, strings.Join(known, ", "))
			return 1
		}
		req.Assign(topic, int32(part), brokers)
	}
	resps, err := adm.AlterPartitionAssignments(rctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "moonmq cluster move: %v\n", err)
		return 1
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			fmt.Fprintf(stderr, "moonmq cluster move: %s/%d: %v %s\n", r.Topic, r.Partition, r.Err, r.ErrMessage)
			return 1
		}
	}
	if *cancelMove {
		fmt.Fprintf(stdout, "cancelled the move of %s/%d\n", topic, part)
		return 0
	}
	fmt.Fprintf(stdout, "moving %s/%d to %s\n", topic, part, group)
	if !*wait {
		return 0
	}
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr)
			fmt.Fprintf(stderr, "moonmq cluster move: stopped waiting; the move goes on (see moonmq cluster status)\n")
			return 1
		case <-tick.C:
		}
		qctx, qcancel := context.WithTimeout(ctx, *af.timeout)
		moves, err := adm.ListPartitionReassignments(qctx, kadm.TopicsSet{topic: {int32(part): struct{}{}}})
		qcancel()
		if err != nil {
			fmt.Fprintf(stderr, "\rmoving %s/%d to %s: %v elapsed; asking failed: %v", topic, part, group, time.Since(start).Round(time.Second), err)
			continue
		}
		if _, moving := moves[topic][int32(part)]; moving {
			fmt.Fprintf(stderr, "\rmoving %s/%d to %s: %v elapsed", topic, part, group, time.Since(start).Round(time.Second))
			continue
		}
		fmt.Fprintln(stderr)
		fmt.Fprintf(stdout, "moved %s/%d to %s in %v\n", topic, part, group, time.Since(start).Round(100*time.Millisecond))
		return 0
	}
}

// interspersed moves the flags in args ahead of the positional arguments,
// so that flags may follow them (the flag package stops at the first
// positional argument).
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, pos...)
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
// watermarks from ends, the lag from sizes and the moves under way.
func FormatCluster(w io.Writer, md kadm.Metadata, ends kadm.ListedOffsets, sizes LogSizes, moves kadm.ListPartitionReassignmentsResponses) {
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
		moving := ""
		if m, ok := moves[pl.topic][p.Partition]; ok && len(m.AddingReplicas) > 0 {
			moving = fmt.Sprintf(" Moving: %s->%s", owner, groupOfID[m.AddingReplicas[0]])
		}
		fmt.Fprintf(w, "Partition: %s/%d Group: %s Leader: %s Epoch: %d Isr: %s HighWatermark: %s Lag: %s%s\n",
			pl.topic, p.Partition, owner, leader, p.LeaderEpoch, ids(p.ISR), hw, sizes.lag(pl.topic, p), moving)
	}
}
