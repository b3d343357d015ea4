package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

// clusterBalance plans and runs moves that spread the user topics'
// partitions evenly over the groups (and moves everything off draining
// groups).
func clusterBalance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "moonmq cluster balance"
	fs := flag.NewFlagSet("cluster balance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	dry := fs.Bool("dry-run", false, "print the moves without starting them")
	concurrent := fs.Int("max-concurrent", 1, "moves under way at once")
	sample := fs.Duration("sample", 5*time.Second, "how long to measure each partition's append rate (0: balance by counts and bytes only)")
	if code := parseAdmin(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 || *concurrent < 1 || *sample < 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q (or --max-concurrent below 1, or a negative --sample)\n%s", name, fs.Args(), ClusterUsage)
		return 2
	}
	adm, seeds, ok := af.client(name, stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	b := balancer{name: name, adm: adm, timeout: *af.timeout, dry: *dry, concurrent: *concurrent, sample: *sample, stdout: stdout, stderr: stderr}
	if code := b.run(ctx, "", func(err error) { af.noBroker(name, stderr, seeds, err) }); code != 0 {
		return code
	}
	return b.leaders(ctx)
}

// clusterDrain marks a group as draining (the cluster-wide broker config
// meta.DrainingGroupsConfig) and moves every partition it owns to the
// other groups, or (--undo) takes the mark off.
func clusterDrain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "moonmq cluster drain"
	fs := flag.NewFlagSet("cluster drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	dry := fs.Bool("dry-run", false, "print the moves without marking the group or starting them")
	undo := fs.Bool("undo", false, "stop draining the group: it takes partitions again")
	concurrent := fs.Int("max-concurrent", 4, "moves under way at once")
	sample := fs.Duration("sample", 0, "how long to measure each partition's append rate, for where its partitions go (0: by counts and bytes only)")
	if code := parseAdmin(fs, interspersed(fs, args)); code >= 0 {
		return code
	}
	if fs.NArg() != 1 || *concurrent < 1 || *sample < 0 {
		fmt.Fprintf(stderr, "%s: want one GROUP, got %q (and --max-concurrent at least 1, --sample not negative)\n%s", name, fs.Args(), ClusterUsage)
		return 2
	}
	group := fs.Arg(0)
	adm, seeds, ok := af.client(name, stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	if !*dry {
		op := kadm.AppendConfig
		if *undo {
			op = kadm.SubtractConfig
		}
		qctx, cancel := context.WithTimeout(ctx, *af.timeout)
		resps, err := adm.AlterBrokerConfigs(qctx, []kadm.AlterConfig{{Op: op, Name: meta.DrainingGroupsConfig, Value: &group}})
		cancel()
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: setting %s on the cluster: %v\n", name, meta.DrainingGroupsConfig, err)
			return 1
		}
	}
	if *undo {
		fmt.Fprintf(stdout, "%s is no longer draining: it takes new partitions, and balance may move partitions to it\n", group)
		return 0
	}
	b := balancer{name: name, adm: adm, timeout: *af.timeout, dry: *dry, concurrent: *concurrent, sample: *sample, stdout: stdout, stderr: stderr}
	// Until nothing is left: a topic created while the mark was
	// being set may still have landed there.
	for round := 0; ; round++ {
		code := b.run(ctx, group, func(err error) { af.noBroker(name, stderr, seeds, err) })
		if code != 0 || *dry {
			return code
		}
		// The broker answering Metadata may apply the cut-overs a
		// little after the moves stopped being listed.
		left, err := b.owned(ctx, group)
		for deadline := time.Now().Add(10 * time.Second); err == nil && left > 0 && time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
			left, err = b.owned(ctx, group)
		}
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "%s: checking what %s still owns: %v\n", name, group, err)
			return 1
		case left == 0:
			fmt.Fprintf(stdout, "drained: %s owns no partition; stop its brokers to remove it (docs/CLUSTER.md, \"Removing a group\")\n", group)
			return 0
		case round == 4:
			fmt.Fprintf(stderr, "%s: %s still owns %d partitions after %d rounds; run it again\n", name, group, left, round+1)
			return 1
		}
	}
}

// balancer plans with meta.PlanBalance from a cluster's Metadata and runs
// the plan's moves, a few at a time, with a progress line.
type balancer struct {
	name       string
	adm        *kadm.Client
	timeout    time.Duration
	dry        bool
	concurrent int
	sample     time.Duration // how long append rates are measured (0: not)
	stdout     io.Writer
	stderr     io.Writer
}

// leaders hands every group led from elsewhere to its preferred replica,
// the first Metadata lists (the broker picks the preferred leaders so
// they spread over machines), with ElectLeaders on one of the group's
// partitions: the group's others follow, as they share its leader.
func (b balancer) leaders(ctx context.Context) int {
	qctx, cancel := context.WithTimeout(ctx, b.timeout)
	md, err := b.adm.Metadata(qctx)
	cancel()
	if err != nil {
		fmt.Fprintf(b.stderr, "%s: reading the groups' leaders: %v\n", b.name, err)
		return 1
	}
	groupOfID := map[int32]string{}
	for _, br := range md.Brokers {
		groupOfID[br.NodeID] = groupOf(br)
	}
	// One partition per group, the first by topic and index.
	type lead struct {
		topic     string
		partition int32
		from, to  int32
	}
	seen := map[string]bool{}
	var elect []lead
	var groups []string
	for _, td := range md.Topics.Sorted() {
		for _, p := range td.Partitions.Sorted() {
			if td.Err != nil || len(p.Replicas) == 0 || p.Leader < 0 {
				continue
			}
			g := groupOfID[p.Replicas[0]]
			if seen[g] {
				continue
			}
			seen[g] = true
			groups = append(groups, g)
			if p.Leader != p.Replicas[0] {
				elect = append(elect, lead{td.Topic, p.Partition, p.Leader, p.Replicas[0]})
			}
		}
	}
	if len(elect) == 0 {
		slices.Sort(groups)
		fmt.Fprintf(b.stdout, "leaders: every group is led by its preferred replica (%s)\n", strings.Join(groups, ", "))
		return 0
	}
	code := 0
	for _, l := range elect {
		g := groupOfID[l.to]
		fmt.Fprintf(b.stdout, "leader of %s: %d -> %d (its preferred replica; through %s/%d)\n", g, l.from, l.to, l.topic, l.partition)
		if b.dry {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, b.timeout)
		res, err := b.adm.ElectLeaders(qctx, kadm.ElectPreferredReplica, kadm.TopicsSet{l.topic: {l.partition: struct{}{}}})
		cancel()
		if err == nil {
			err = res[l.topic][l.partition].Err
		}
		switch {
		case err == nil, errors.Is(err, kerr.ElectionNotNeeded):
		case errors.Is(err, kerr.PreferredLeaderNotAvailable):
			fmt.Fprintf(b.stderr, "%s: %s keeps leader %d: its preferred replica %d is not live and in sync now\n", b.name, g, l.from, l.to)
		default:
			fmt.Fprintf(b.stderr, "%s: moving %s's leadership to %d: %v\n", b.name, g, l.to, err)
			code = 1
		}
	}
	return code
}

// coordTopics are the coordinators' topics: their partitions move only
// off a draining group.
var coordTopics = []string{"__consumer_offsets", "__transaction_state"}

// rates measures the bytes per second each broker's partitions grew by
// since sizes were read (at sampled), over b.sample, and returns the sizes
// read last; no rates without a sample. A partition that shrank
// (retention) counts as idle.
func (b balancer) rates(ctx context.Context, sizes LogSizes, sampled time.Time) (LogSizes, map[int32]map[string]map[int32]float64) {
	if b.sample <= 0 {
		return sizes, nil
	}
	fmt.Fprintf(b.stderr, "%s: measuring append rates for %s (--sample)\n", b.name, b.sample)
	select {
	case <-time.After(b.sample):
	case <-ctx.Done():
		return sizes, nil
	}
	qctx, cancel := context.WithTimeout(ctx, b.timeout)
	dirs, err := b.adm.DescribeAllLogDirs(qctx, nil)
	cancel()
	if err != nil {
		fmt.Fprintf(b.stderr, "%s: measuring append rates: %v; balancing by counts and bytes only\n", b.name, err)
		return sizes, nil
	}
	secs := time.Since(sampled).Seconds()
	latest := logSizes(dirs)
	out := map[int32]map[string]map[int32]float64{}
	for broker, topics := range latest {
		for topic, parts := range topics {
			for p, n := range parts {
				before, ok := sizes.size(broker, topic, p)
				if !ok || n <= before {
					continue
				}
				if out[broker] == nil {
					out[broker] = map[string]map[int32]float64{}
				}
				if out[broker][topic] == nil {
					out[broker][topic] = map[int32]float64{}
				}
				out[broker][topic][p] = float64(n-before) / secs
			}
		}
	}
	return latest, out
}

// owned counts the partitions group owns.
func (b balancer) owned(ctx context.Context, group string) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	md, err := b.adm.Metadata(qctx)
	if err != nil {
		return 0, err
	}
	groupOfID := map[int32]string{}
	for _, br := range md.Brokers {
		groupOfID[br.NodeID] = groupOf(br)
	}
	n := 0
	for _, td := range md.Topics {
		for _, p := range td.Partitions {
			if len(p.Replicas) > 0 && groupOfID[p.Replicas[0]] == group {
				n++
			}
		}
	}
	return n, nil
}

// run plans and runs one round of moves; draining (if not "") counts as
// draining whether or not the cluster's config says so yet (a dry run).
func (b balancer) run(ctx context.Context, draining string, noBroker func(error)) int {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	md, err := b.adm.Metadata(rctx)
	if err != nil {
		cancel()
		noBroker(err)
		return 1
	}
	groupOfID := map[int32]string{}
	var groups []string
	for _, br := range md.Brokers {
		g := groupOf(br)
		groupOfID[br.NodeID] = g
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	var drainingGroups []string
	if cfgs, err := b.adm.DescribeBrokerConfigs(rctx); err == nil {
		for _, rc := range cfgs {
			for _, c := range rc.Configs {
				if c.Key == meta.DrainingGroupsConfig && c.Value != nil {
					drainingGroups = meta.ParseGroupList(*c.Value)
				}
			}
		}
	}
	if draining != "" && !slices.Contains(drainingGroups, draining) {
		drainingGroups = append(drainingGroups, draining)
	}
	dirs, _ := b.adm.DescribeAllLogDirs(rctx, nil)
	sizes, sampled := logSizes(dirs), time.Now()
	cancel()
	sizes, rates := b.rates(ctx, sizes, sampled)
	rctx, cancel = context.WithTimeout(ctx, b.timeout)
	var moving kadm.ListPartitionReassignmentsResponses
	if len(md.Topics) > 0 {
		moving, _ = b.adm.ListPartitionReassignments(rctx, md.Topics.TopicsSet())
	}
	cancel()
	var parts []meta.PartitionLoad
	for _, td := range md.Topics.Sorted() {
		pinned := slices.Contains(coordTopics, td.Topic)
		if td.Err != nil || (td.IsInternal || strings.HasPrefix(td.Topic, "__")) && !pinned {
			continue
		}
		for _, p := range td.Partitions.Sorted() {
			if len(p.Replicas) == 0 {
				continue
			}
			if _, busy := moving[td.Topic][p.Partition]; busy {
				fmt.Fprintf(b.stderr, "%s: %s/%d is moving already; left where it is\n", b.name, td.Topic, p.Partition)
				continue
			}
			n, _ := sizes.size(p.Leader, td.Topic, p.Partition)
			parts = append(parts, meta.PartitionLoad{Topic: td.Topic, Partition: p.Partition, Group: groupOfID[p.Replicas[0]], Bytes: n,
				Rate: rates[p.Leader][td.Topic][p.Partition], Pinned: pinned})
		}
	}
	plan := meta.PlanBalance(parts, groups, drainingGroups)
	if len(plan) == 0 {
		fmt.Fprintf(b.stdout, "balanced: %d partitions over %d groups (%s)", len(parts), len(groups), strings.Join(groups, ", "))
		if len(drainingGroups) > 0 {
			fmt.Fprintf(b.stdout, ", draining %s", strings.Join(drainingGroups, ", "))
		}
		fmt.Fprintln(b.stdout)
		return 0
	}
	for _, m := range plan {
		fmt.Fprintf(b.stdout, "move %s/%d %s -> %s (%d bytes)\n", m.Topic, m.Partition, m.From, m.To, m.Bytes)
	}
	if b.dry {
		return 0
	}
	brokersOf := map[string][]int32{}
	for id, g := range groupOfID {
		brokersOf[g] = append(brokersOf[g], id)
	}
	start := time.Now()
	done, failed := 0, 0
	var running []meta.PlannedMove
	next := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for done+failed < len(plan) {
		for len(running) < b.concurrent && next < len(plan) {
			m := plan[next]
			next++
			var req kadm.AlterPartitionAssignmentsReq
			req.Assign(m.Topic, m.Partition, brokersOf[m.To])
			qctx, qcancel := context.WithTimeout(ctx, b.timeout)
			resps, err := b.adm.AlterPartitionAssignments(qctx, req)
			qcancel()
			if err == nil {
				for _, r := range resps.Sorted() {
					if r.Err != nil {
						err = fmt.Errorf("%w %s", r.Err, r.ErrMessage)
					}
				}
			}
			if err != nil {
				fmt.Fprintf(b.stderr, "\n%s: moving %s/%d to %s: %v\n", b.name, m.Topic, m.Partition, m.To, err)
				failed++
				continue
			}
			running = append(running, m)
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(b.stderr, "\n%s: stopped waiting with %d moves started and %d not; the started ones go on\n", b.name, next-failed, len(plan)-next)
			return 1
		case <-tick.C:
		}
		if len(running) > 0 {
			set := kadm.TopicsSet{}
			for _, m := range running {
				set.Add(m.Topic, m.Partition)
			}
			qctx, qcancel := context.WithTimeout(ctx, b.timeout)
			listed, err := b.adm.ListPartitionReassignments(qctx, set)
			qcancel()
			if err == nil {
				running = slices.DeleteFunc(running, func(m meta.PlannedMove) bool {
					_, still := listed[m.Topic][m.Partition]
					if !still {
						done++
					}
					return !still
				})
			}
		}
		fmt.Fprintf(b.stderr, "\rmoving: %d of %d moves done, %d under way, %v elapsed", done, len(plan), len(running), time.Since(start).Round(time.Second))
	}
	fmt.Fprintln(b.stderr)
	fmt.Fprintf(b.stdout, "balanced: %d moves in %v\n", done, time.Since(start).Round(100*time.Millisecond))
	if failed > 0 {
		fmt.Fprintf(b.stderr, "%s: %d moves could not start; run it again\n", b.name, failed)
		return 1
	}
	return 0
}
