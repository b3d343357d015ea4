package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// PartitionLoad is one partition as the balancer sees it: its owner
// group and its size on the owner's leader.
type PartitionLoad struct {
	Topic     string
	Partition int32
	Group     string
	Bytes     int64
}

// PlannedMove is a partition to move to another group.
type PlannedMove struct {
	Topic     string
	Partition int32
	From, To  string
	Bytes     int64
}

// PlanBalance spreads parts over groups so that the groups' partition
// counts differ by at most one, moving as few partitions as it can, and
// among the candidates the smallest first (fewer bytes to copy). A group
// in groups that owns nothing yet (a new one) takes its share. The plan
// is deterministic: ties go by topic and partition.
func PlanBalance(parts []PartitionLoad, groups []string) []PlannedMove {
	if len(groups) < 2 {
		return nil
	}
	owned := map[string][]PartitionLoad{}
	for _, g := range groups {
		owned[g] = nil
	}
	for _, p := range parts {
		if _, ok := owned[p.Group]; ok {
			owned[p.Group] = append(owned[p.Group], p)
		}
	}
	bytesOf := func(g string) int64 {
		var n int64
		for _, p := range owned[g] {
			n += p.Bytes
		}
		return n
	}
	// Most loaded first: more partitions, then more bytes, then by name.
	order := func(a, b string) int {
		if c := cmp.Compare(len(owned[b]), len(owned[a])); c != 0 {
			return c
		}
		if c := cmp.Compare(bytesOf(b), bytesOf(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	var plan []PlannedMove
	for {
		gs := slices.Clone(groups)
		slices.SortFunc(gs, order)
		hi, lo := gs[0], gs[len(gs)-1]
		if len(owned[hi])-len(owned[lo]) <= 1 {
			return plan
		}
		cands := owned[hi]
		slices.SortFunc(cands, func(a, b PartitionLoad) int {
			return cmp.Or(cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		p := cands[0]
		owned[hi] = cands[1:]
		p.Group = lo
		owned[lo] = append(owned[lo], p)
		plan = append(plan, PlannedMove{Topic: p.Topic, Partition: p.Partition, From: hi, To: lo, Bytes: p.Bytes})
	}
}

// clusterBalance plans and runs moves that spread the user topics'
// partitions evenly over the groups.
func clusterBalance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cluster balance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ClusterUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	dry := fs.Bool("dry-run", false, "print the moves without starting them")
	concurrent := fs.Int("max-concurrent", 1, "moves under way at once")
	if code := parseAdmin(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 || *concurrent < 1 {
		fmt.Fprintf(stderr, "moonmq cluster balance: unexpected arguments %q (or --max-concurrent below 1)\n%s", fs.Args(), ClusterUsage)
		return 2
	}
	adm, seeds, ok := af.client("moonmq cluster balance", stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	rctx, cancel := context.WithTimeout(ctx, *af.timeout)
	md, err := adm.Metadata(rctx)
	if err != nil {
		cancel()
		af.noBroker("moonmq cluster balance", stderr, seeds, err)
		return 1
	}
	groupOfID := map[int32]string{}
	var groups []string
	for _, b := range md.Brokers {
		g := groupOf(b)
		groupOfID[b.NodeID] = g
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	dirs, _ := adm.DescribeAllLogDirs(rctx, nil)
	sizes := logSizes(dirs)
	var moving kadm.ListPartitionReassignmentsResponses
	if len(md.Topics) > 0 {
		moving, _ = adm.ListPartitionReassignments(rctx, md.Topics.TopicsSet())
	}
	var compacted []string
	if cfgs, err := adm.DescribeTopicConfigs(rctx, md.Topics.Names()...); err == nil {
		for _, rc := range cfgs {
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
					compacted = append(compacted, rc.Name)
				}
			}
		}
	}
	cancel()
	var parts []PartitionLoad
	for _, td := range md.Topics.Sorted() {
		// The coordinators' and compacted topics do not move yet.
		if td.Err != nil || td.IsInternal || strings.HasPrefix(td.Topic, "__") || slices.Contains(compacted, td.Topic) {
			continue
		}
		for _, p := range td.Partitions.Sorted() {
			if len(p.Replicas) == 0 {
				continue
			}
			if _, busy := moving[td.Topic][p.Partition]; busy {
				fmt.Fprintf(stderr, "moonmq cluster balance: %s/%d is moving already; left where it is\n", td.Topic, p.Partition)
			}
			n, _ := sizes.size(p.Leader, td.Topic, p.Partition)
			parts = append(parts, PartitionLoad{Topic: td.Topic, Partition: p.Partition, Group: groupOfID[p.Replicas[0]], Bytes: n})
		}
	}
	plan := PlanBalance(parts, groups)
	if len(plan) == 0 {
		fmt.Fprintf(stdout, "balanced: %d partitions over %d groups (%s)\n", len(parts), len(groups), strings.Join(groups, ", "))
		return 0
	}
	for _, m := range plan {
		fmt.Fprintf(stdout, "move %s/%d %s -> %s (%d bytes)\n", m.Topic, m.Partition, m.From, m.To, m.Bytes)
	}
	if *dry {
		return 0
	}
	brokersOf := map[string][]int32{}
	for id, g := range groupOfID {
		brokersOf[g] = append(brokersOf[g], id)
	}
	start := time.Now()
	done, failed := 0, 0
	var running []PlannedMove
	next := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for done+failed < len(plan) {
		for len(running) < *concurrent && next < len(plan) {
			m := plan[next]
			next++
			var req kadm.AlterPartitionAssignmentsReq
			req.Assign(m.Topic, m.Partition, brokersOf[m.To])
			qctx, qcancel := context.WithTimeout(ctx, *af.timeout)
			resps, err := adm.AlterPartitionAssignments(qctx, req)
			qcancel()
			if err == nil {
				for _, r := range resps.Sorted() {
					if r.Err != nil {
						err = fmt.Errorf("%w %s", r.Err, r.ErrMessage)
					}
				}
			}
			if err != nil {
				fmt.Fprintf(stderr, "\nmoonmq cluster balance: moving %s/%d to %s: %v\n", m.Topic, m.Partition, m.To, err)
				failed++
				continue
			}
			running = append(running, m)
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "\nmoonmq cluster balance: stopped waiting with %d moves started and %d not; the started ones go on\n", next-failed, len(plan)-next)
			return 1
		case <-tick.C:
		}
		if len(running) > 0 {
			set := kadm.TopicsSet{}
			for _, m := range running {
				set.Add(m.Topic, m.Partition)
			}
			qctx, qcancel := context.WithTimeout(ctx, *af.timeout)
			listed, err := adm.ListPartitionReassignments(qctx, set)
			qcancel()
			if err == nil {
				running = slices.DeleteFunc(running, func(m PlannedMove) bool {
					_, still := listed[m.Topic][m.Partition]
					if !still {
						done++
					}
					return !still
				})
			}
		}
		fmt.Fprintf(stderr, "\rbalancing: %d of %d moves done, %d under way, %v elapsed", done, len(plan), len(running), time.Since(start).Round(time.Second))
	}
	fmt.Fprintln(stderr)
	fmt.Fprintf(stdout, "balanced: %d moves in %v\n", done, time.Since(start).Round(100*time.Millisecond))
	if failed > 0 {
		fmt.Fprintf(stderr, "moonmq cluster balance: %d moves could not start; run it again\n", failed)
		return 1
	}
	return 0
}
