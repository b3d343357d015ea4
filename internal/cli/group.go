package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// GroupUsage is the usage text of `moonmq group`.
const GroupUsage = `usage: moonmq group list     [--bootstrap HOST:PORT[,...]] [--config FILE]
       moonmq group describe [--bootstrap HOST:PORT[,...]] [--config FILE] [GROUP...]
       moonmq group delete   [--bootstrap HOST:PORT[,...]] [--config FILE] GROUP...
       moonmq group seek     [--bootstrap HOST:PORT[,...]] [--config FILE] --to start|end|OFFSET [--topics T1,T2] GROUP

list prints every consumer group: its type (classic, or consumer for the
KIP-848 protocol) and state.
describe prints each group's committed offsets with the log end offset and
lag of every partition, and the member that consumes it, as
kafka-consumer-groups --describe does:
  GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID
Without GROUP it describes every group.
delete deletes empty groups with their committed offsets.
seek sets the committed offsets of a group without members: to each
partition's start, its end, or OFFSET (moved into [start, end]), for the
topics the group has offsets for, or those of --topics. Stop the group's
consumers first.
The brokers come from --bootstrap, else from --config (every replica's
ClientAddress), else 127.0.0.1:9092.
`

// GroupView is one group as `group describe` prints it.
type GroupView struct {
	Group    string
	Type     string // "classic" or "consumer" (KIP-848)
	State    string
	Assignor string
	Members  int
	// Err is why the group could not be described ("" if it was).
	Err        string
	Partitions []GroupPartitionView
}

// GroupPartitionView is one partition of a group: its committed offset
// (-1: none), the partition's log end (-1: unknown), the lag (-1:
// unknown), and the member it is assigned to, if any.
type GroupPartitionView struct {
	Topic     string
	Partition int32
	Committed int64
	End       int64
	Lag       int64
	MemberID  string
	Host      string
	ClientID  string
}

// GroupMember is what a group view needs of one member.
type GroupMember struct {
	ID, ClientID, Host string
	Assigned           map[string][]int32
}

// BuildGroupView joins a group's members, committed offsets and the log
// ends of their partitions into rows sorted by topic and partition: every
// partition that has a committed offset or is assigned to a member.
func BuildGroupView(v GroupView, members []GroupMember, committed kadm.OffsetResponses, ends kadm.ListedOffsets) GroupView {
	type tp struct {
		t string
		p int32
	}
	rows := map[tp]*GroupPartitionView{}
	row := func(t string, p int32) *GroupPartitionView {
		k := tp{t, p}
		if r := rows[k]; r != nil {
			return r
		}
		r := &GroupPartitionView{Topic: t, Partition: p, Committed: -1, End: -1, Lag: -1}
		rows[k] = r
		return r
	}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			row(o.Topic, o.Partition).Committed = o.At
		}
	})
	for _, m := range members {
		for t, ps := range m.Assigned {
			for _, p := range ps {
				r := row(t, p)
				r.MemberID, r.Host, r.ClientID = m.ID, m.Host, m.ClientID
			}
		}
	}
	v.Members = len(members)
	v.Partitions = v.Partitions[:0]
	for _, r := range rows {
		if e, ok := ends.Lookup(r.Topic, r.Partition); ok && e.Err == nil {
			r.End = e.Offset
			if r.Committed >= 0 {
				r.Lag = max(r.End-r.Committed, 0)
			}
		}
		v.Partitions = append(v.Partitions, *r)
	}
	sort.Slice(v.Partitions, func(i, j int) bool {
		a, b := v.Partitions[i], v.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return v
}

// FormatGroups prints groups as kafka-consumer-groups --describe does,
// each after a line with its type, state, assignor and member count.
func FormatGroups(w io.Writer, groups []GroupView) {
	for i, g := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if g.Err != "" {
			fmt.Fprintf(w, "Group: %s Error: %s\n", g.Group, g.Err)
			continue
		}
		head := fmt.Sprintf("Group: %s Type: %s State: %s Members: %d", g.Group, g.Type, g.State, g.Members)
		if g.Assignor != "" {
			head += " Assignor: " + g.Assignor
		}
		fmt.Fprintln(w, head)
		if len(g.Partitions) == 0 {
			fmt.Fprintln(w, "  (no committed offsets and no assigned partitions)")
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID")
		for _, p := range g.Partitions {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, p.Topic, p.Partition,
				orDash(p.Committed), orDash(p.End), orDash(p.Lag), dashIfEmpty(p.MemberID), dashIfEmpty(p.Host), dashIfEmpty(p.ClientID))
		}
		_ = tw.Flush()
	}
}

// FormatGroupList prints `group list`.
func FormatGroupList(w io.Writer, groups []kadm.ListedGroup) {
	tw := newTable(w)
	fmt.Fprintln(tw, "GROUP\tTYPE\tSTATE")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Group, groupType(g), dashIfEmpty(g.State))
	}
	_ = tw.Flush()
}

// groupType names a listed group's protocol: "consumer" for KIP-848
// groups, "classic" otherwise (brokers below ListGroups v5 say nothing).
func groupType(g kadm.ListedGroup) string {
	if g.GroupType != "" {
		return g.GroupType
	}
	return "classic"
}

func orDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// SeekTarget turns --to into an offset for one partition whose log spans
// [start, end): "start", "end", or a number moved into that range.
func SeekTarget(to string, start, end int64) (int64, error) {
	switch to {
	case "start", "earliest":
		return start, nil
	case "end", "latest":
		return end, nil
	}
	n, err := strconv.ParseInt(to, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--to %q: want start, end or an offset (a number >= 0)", to)
	}
	return min(max(n, start), end), nil
}

// Group runs `moonmq group list|describe|delete|seek` and returns the
// process exit code: 0 on success, 1 when a broker refused or a group
// was not found, 2 for bad usage.
func Group(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "moonmq group"
	if len(args) == 0 {
		fmt.Fprint(stderr, GroupUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "list", "describe", "delete", "seek":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, GroupUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "%s: unknown subcommand %q\n%s", cmd, sub, GroupUsage)
		return 2
	}
	fs := flag.NewFlagSet("group "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, GroupUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	var to, topics *string
	if sub == "seek" {
		to = fs.String("to", "", "start, end, or an offset")
		topics = fs.String("topics", "", "comma-separated topics (default: those the group has committed offsets for)")
	}
	if code := parseAdmin(fs, args[1:]); code >= 0 {
		return code
	}
	names := fs.Args()
	switch {
	case sub == "list" && len(names) > 0:
		fmt.Fprintf(stderr, "%s list: unexpected argument %q\n", cmd, names[0])
		return 2
	case (sub == "delete") && len(names) == 0:
		fmt.Fprintf(stderr, "%s delete: name the groups to delete\n", cmd)
		return 2
	case sub == "seek" && (len(names) != 1 || *to == ""):
		fmt.Fprintf(stderr, "%s seek: want --to start|end|OFFSET and exactly one GROUP\n", cmd)
		return 2
	}
	adm, seeds, ok := af.client(cmd, stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, *af.timeout)
	defer cancel()

	listed, err := adm.ListGroups(ctx)
	if err != nil {
		af.noBroker(cmd, stderr, seeds, err)
		return 1
	}
	switch sub {
	case "list":
		FormatGroupList(stdout, listed.Sorted())
		return 0
	case "delete":
		return deleteGroups(ctx, adm, names, stdout, stderr)
	case "seek":
		return seekGroup(ctx, adm, names[0], *to, *topics, stdout, stderr)
	}
	if len(names) == 0 {
		names = listed.Groups()
		sort.Strings(names)
	}
	views, missing := describeGroups(ctx, adm, listed, names)
	FormatGroups(stdout, views)
	if missing {
		return 1
	}
	return 0
}

// describeGroups builds the views of names; missing reports a group that
// is not there or could not be described.
func describeGroups(ctx context.Context, adm *kadm.Client, listed kadm.ListedGroups, names []string) (views []GroupView, missing bool) {
	var classic, consumer []string
	for _, n := range names {
		if l, ok := listed[n]; ok && groupType(l) == "consumer" {
			consumer = append(consumer, n)
		} else {
			classic = append(classic, n)
		}
	}
	members := map[string][]GroupMember{}
	base := map[string]GroupView{}
	if len(classic) > 0 {
		described, err := adm.DescribeGroups(ctx, classic...)
		for _, n := range classic {
			d, ok := described[n]
			v := GroupView{Group: n, Type: "classic", Err: describeErr(ok, d.State == "Dead", err, d.Err)}
			if v.Err == "" {
				v.State, v.Assignor = d.State, d.Protocol
				for _, m := range d.Members {
					gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
					if a, ok := m.Assigned.AsConsumer(); ok {
						for _, t := range a.Topics {
							gm.Assigned[t.Topic] = append(gm.Assigned[t.Topic], t.Partitions...)
						}
					}
					members[n] = append(members[n], gm)
				}
			}
			base[n] = v
		}
	}
	if len(consumer) > 0 {
		described, err := adm.DescribeConsumerGroups(ctx, consumer...)
		for _, n := range consumer {
			d, ok := described[n]
			v := GroupView{Group: n, Type: "consumer", Err: describeErr(ok, false, err, d.Err)}
			if v.Err == "" {
				v.State, v.Assignor = d.State, d.AssignorName
				for _, m := range d.Members {
					gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
					for t, ps := range m.Assignment {
						for p := range ps {
							gm.Assigned[t] = append(gm.Assigned[t], p)
						}
					}
					members[n] = append(members[n], gm)
				}
			}
			base[n] = v
		}
	}
	for _, n := range names {
		v := base[n]
		if v.Err != "" {
			missing = true
			views = append(views, v)
			continue
		}
		committed, err := adm.FetchOffsets(ctx, n)
		if err != nil {
			v.Err = "fetching committed offsets: " + err.Error()
			missing = true
			views = append(views, v)
			continue
		}
		topicSet := map[string]bool{}
		committed.Each(func(o kadm.OffsetResponse) { topicSet[o.Topic] = true })
		for _, m := range members[n] {
			for t := range m.Assigned {
				topicSet[t] = true
			}
		}
		var ends kadm.ListedOffsets
		if len(topicSet) > 0 {
			ts := make([]string, 0, len(topicSet))
			for t := range topicSet {
				ts = append(ts, t)
			}
			ends, _ = adm.ListEndOffsets(ctx, ts...) // a partition without an end shows "-"
		}
		views = append(views, BuildGroupView(v, members[n], committed, ends))
	}
	return views, missing
}

// describeErr is why a group could not be described ("" if it could):
// the request's error when the answer lacks the group, GROUP_ID_NOT_FOUND
// when it lacks it otherwise or the group is dead, else the group's own.
func describeErr(found, dead bool, reqErr, groupErr error) string {
	switch {
	case !found && reqErr != nil:
		return reqErr.Error()
	case !found || dead:
		return "GROUP_ID_NOT_FOUND"
	case groupErr != nil:
		return groupErr.Error()
	}
	return ""
}

func deleteGroups(ctx context.Context, adm *kadm.Client, names []string, stdout, stderr io.Writer) int {
	resps, err := adm.DeleteGroups(ctx, names...)
	if err != nil && len(resps) == 0 {
		fmt.Fprintln(stderr, "moonmq group delete:", err)
		return 1
	}
	code := 0
	for _, n := range names {
		r, ok := resps[n]
		switch {
		case !ok:
			fmt.Fprintf(stderr, "%s: no answer\n", n)
			code = 1
		case errors.Is(r.Err, kerr.NonEmptyGroup):
			fmt.Fprintf(stderr, "%s: the group has members: stop its consumers first\n", n)
			code = 1
		case r.Err != nil:
			fmt.Fprintf(stderr, "%s: %v\n", n, r.Err)
			code = 1
		default:
			fmt.Fprintf(stdout, "deleted group %s\n", n)
		}
	}
	return code
}

func seekGroup(ctx context.Context, adm *kadm.Client, group, to, topicList string, stdout, stderr io.Writer) int {
	const cmd = "moonmq group seek"
	if _, err := SeekTarget(to, 0, 0); err != nil {
		fmt.Fprintln(stderr, cmd+":", err)
		return 2
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		fmt.Fprintln(stderr, cmd+": fetching the group's offsets:", err)
		return 1
	}
	var topics []string
	for _, t := range strings.Split(topicList, ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		seen := map[string]bool{}
		committed.Each(func(o kadm.OffsetResponse) {
			if !seen[o.Topic] {
				seen[o.Topic] = true
				topics = append(topics, o.Topic)
			}
		})
		if len(topics) == 0 {
			fmt.Fprintf(stderr, "%s: group %s has no committed offsets; name the topics with --topics\n", cmd, group)
			return 2
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, cmd+": listing the topics' offsets:", err)
		return 1
	}
	var next kadm.Offsets
	starts.Each(func(s kadm.ListedOffset) {
		e, _ := ends.Lookup(s.Topic, s.Partition)
		at, _ := SeekTarget(to, s.Offset, e.Offset)
		next.Add(kadm.Offset{Topic: s.Topic, Partition: s.Partition, At: at, LeaderEpoch: -1})
	})
	resps, err := adm.CommitOffsets(ctx, group, next)
	if err == nil {
		err = resps.Error()
	}
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
		fmt.Fprintf(stderr, "%s: group %s has members, which own its offsets: stop its consumers first\n", cmd, group)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, cmd+":", err)
		return 1
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tOLD-OFFSET\tNEW-OFFSET")
	for _, o := range next.Sorted() {
		old := int64(-1)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			old = c.At
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", group, o.Topic, o.Partition, orDash(old), o.At)
	}
	_ = tw.Flush()
	return 0
}
