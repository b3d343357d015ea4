package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

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
	var parts []meta.PartitionLoad
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
			parts = append(parts, meta.PartitionLoad{Topic: td.Topic, Partition: p.Partition, Group: groupOfID[p.Replicas[0]], Bytes: n})
		}
	}
	plan := meta.PlanBalance(parts, groups)
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
	var running []meta.PlannedMove
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
				running = slices.DeleteFunc(running, func(m meta.PlannedMove) bool {
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
