package cli

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moonmq/moonmq/internal/status"
)

// StatusView is what FormatStatus prints: the status object and what the
// CLI learned around it.
type StatusView struct {
	Doc status.Replication
	// Now is the time follower fetch ages are measured from.
	Now time.Time
	// Logs is the leader's log range per "topic-partition", read from its
	// metrics port; nil when unknown. Lag needs it because the status
	// object carries the followers' positions but not the leader's ends.
	Logs map[string]LogRange
}

// maxListed caps the partitions named on one line; a group with thousands
// of partitions must still print one readable line per follower.
const maxListed = 3

// FormatStatus prints a replication status for a person.
func FormatStatus(w io.Writer, v StatusView) {
	d := v.Doc
	mode := "static mode"
	if d.Raft != nil {
		mode = "failover mode"
		if d.Role == "leader" {
			mode += ", serving"
		}
	}
	fmt.Fprintf(w, "replica %d: %s (%s)\n", d.ReplicaID, d.Role, mode)
	if d.Leader < 0 {
		fmt.Fprintf(w, "leader:    none known (election under way, or no majority), epoch %d\n", d.Epoch)
	} else {
		fmt.Fprintf(w, "leader:    %d, epoch %d\n", d.Leader, d.Epoch)
	}
	isr := ids(d.ISR)
	if d.Raft != nil && !d.Raft.HasISR {
		isr = "none committed yet"
	} else if len(d.ISR) == 0 {
		isr = "none"
	}
	fmt.Fprintf(w, "ISR:       %s\n", isr)
	if r := d.Raft; r != nil {
		line := fmt.Sprintf("raft:      %s, term %d, commit index %d, applied %d", r.Role, r.RaftTerm, r.CommitIndex, r.Applied)
		if r.Role != "leader" {
			if r.RaftLeader >= 0 {
				line += fmt.Sprintf(", raft leader %d", r.RaftLeader)
			} else {
				line += ", no raft leader known"
			}
		}
		fmt.Fprintln(w, line)
		switch {
		case r.HandingOff:
			fmt.Fprintln(w, "note:      Raft leader outside the ISR: handing leadership to an ISR member")
		case r.Role == "leader" && d.Role != "leader":
			fmt.Fprintln(w, "note:      Raft leader, not serving yet (its claim is committing or its state is rebuilding)")
		}
		if r.Err != "" {
			fmt.Fprintf(w, "ERROR:     Raft storage failed and this replica stopped: %s\n", r.Err)
		}
	}
	if d.Role != "leader" && len(d.ISR) > 0 && !slices.Contains(d.ISR, d.ReplicaID) {
		fmt.Fprintln(w, "note:      this replica is not in the ISR (catching up)")
	}
	if d.Followers != nil {
		formatFollowers(w, v)
	}
	if f := d.Follower; f != nil {
		formatFollowing(w, f)
	}
}

func formatFollowers(w io.Writer, v StatusView) {
	d := v.Doc
	if len(d.Followers) == 0 {
		fmt.Fprintln(w, "followers: none")
		return
	}
	fmt.Fprintln(w, "followers:")
	tw := newTable(w)
	reported := false // the leader gave each follower's lag itself
	for _, fp := range d.Followers {
		reported = reported || fp.Lag != nil
	}
	switch {
	case v.Logs != nil:
		fmt.Fprintln(tw, "  REPLICA\tIN ISR\tLAST FETCH\tLAG (RECORDS)\tBEHIND ON")
	case reported:
		fmt.Fprintln(tw, "  REPLICA\tIN ISR\tLAST FETCH\tLAG (RECORDS)\tPOSITIONS")
	default:
		fmt.Fprintln(tw, "  REPLICA\tIN ISR\tLAST FETCH\tPOSITIONS")
	}
	for _, id := range sortedIDs(d.Followers) {
		fp := d.Followers[id]
		n, _ := strconv.Atoi(id)
		in := "no"
		if slices.Contains(d.ISR, int32(n)) {
			in = "yes"
		}
		fetched := "never"
		if !fp.LastFetch.IsZero() {
			fetched = age(v.Now.Sub(fp.LastFetch)) + " ago"
		}
		if v.Logs == nil && reported {
			lagText := "-"
			if fp.Lag != nil {
				lagText = strconv.FormatInt(*fp.Lag, 10)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", id, in, fetched, lagText, positions(fp.Partitions))
			continue
		}
		if v.Logs == nil {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", id, in, fetched, positions(fp.Partitions))
			continue
		}
		lag, behind := followerLag(fp, v.Logs)
		lagText := strconv.FormatInt(lag, 10)
		if fp.LastFetch.IsZero() {
			lagText = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", id, in, fetched, lagText, behind)
	}
	_ = tw.Flush()
	if v.Logs == nil && !reported {
		fmt.Fprintln(w, "           (lag needs the leader's log ends from its metrics port: pass --metrics HOST:PORT or --config FILE)")
	}
}

// followerLag is how many records the follower lacks over every partition
// of the leader, and the partitions furthest behind. A partition the
// follower has not reported counts as wholly missing.
func followerLag(fp status.FollowerPosition, logs map[string]LogRange) (int64, string) {
	type gap struct {
		key string
		n   int64
	}
	var total int64
	var gaps []gap
	for key, lr := range logs {
		pos, ok := fp.Partitions[key]
		if !ok {
			pos = lr.Start
		}
		if n := lr.End - max(pos, lr.Start); n > 0 {
			total += n
			gaps = append(gaps, gap{key, n})
		}
	}
	sort.Slice(gaps, func(i, j int) bool {
		if gaps[i].n != gaps[j].n {
			return gaps[i].n > gaps[j].n
		}
		return gaps[i].key < gaps[j].key
	})
	var parts []string
	for i, g := range gaps {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("+%d more", len(gaps)-maxListed))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d)", g.key, g.n))
	}
	return total, strings.Join(parts, ", ")
}

func positions(ps map[string]int64) string {
	if len(ps) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(ps))
	for k := range ps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for i, k := range keys {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("+%d more", len(keys)-maxListed))
			break
		}
		parts = append(parts, fmt.Sprintf("%s@%d", k, ps[k]))
	}
	return strings.Join(parts, ", ")
}

func formatFollowing(w io.Writer, f *status.Follower) {
	target := "no leader yet"
	if f.LeaderID >= 0 && f.Leader != "" {
		target = fmt.Sprintf("replica %d at %s, epoch %d", f.LeaderID, f.Leader, f.Epoch)
	}
	state := f.State
	if state == "" {
		state = "unknown"
	}
	fmt.Fprintf(w, "following: %s; state %s; %d fetches, %d resets, %d corrupt batches\n",
		target, state, f.Fetches, f.Resets, f.CorruptBatches)
	if f.Unauthorized {
		fmt.Fprintln(w, "ERROR:     the leader rejects this replica's token: Replication.Token must be the same on every replica")
	}
	if f.Fenced {
		fmt.Fprintln(w, "note:      fenced by a newer epoch: waiting to learn the new leader")
	}
	if len(f.Unsyncable) > 0 {
		fmt.Fprintf(w, "ERROR:     cannot fsync the logs of %s: check the disk\n", strings.Join(f.Unsyncable, ", "))
	}
	if f.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", f.LastError)
	}
}

// FormatStats prints the metrics port's /stats for a person.
func FormatStats(w io.Writer, s status.Stats) {
	role := s.Role
	if role == "" {
		role = "unknown role"
	}
	fmt.Fprintf(w, "node %d (%s), cluster %s\n", s.NodeID, role, s.ClusterID)
	fmt.Fprintf(w, "connections: %d, requests: %d, bad frames: %d\n", s.Connections, s.Requests, s.BadFrames)
	fmt.Fprintf(w, "produced:    %d records, %s; fetched: %s\n", s.ProducedRecords, bytesText(s.ProducedBytes), bytesText(s.FetchedBytes))
	if s.Fsyncs > 0 {
		fmt.Fprintf(w, "fsyncs:      %d, average %s\n", s.Fsyncs, time.Duration(s.FsyncAvgMicros)*time.Microsecond)
	} else {
		fmt.Fprintln(w, "fsyncs:      0")
	}
	if e := s.Expired; e != (status.Expired{}) {
		fmt.Fprintf(w, "expired:     %d offsets, %d groups, %d producers, %d transactional ids\n", e.Offsets, e.Groups, e.Producers, e.TransactionalIDs)
	}
	fmt.Fprintf(w, "topics:      %d\n", s.Topics)
	if len(s.Partitions) == 0 {
		return
	}
	ps := slices.Clone(s.Partitions)
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	tw := newTable(w)
	fmt.Fprintln(tw, "  PARTITION\tLOG START\tHIGH WATERMARK\tLOG END\tSIZE")
	for _, p := range ps {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\n", partKey(p.Topic, p.Partition), p.LogStartOffset, p.HighWatermark, p.LogEndOffset, bytesText(p.SizeBytes))
	}
	_ = tw.Flush()
}

// table aligns columns like tabwriter and drops the padding an empty last
// column leaves at the end of a line.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{w: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

// Flush writes the aligned table.
func (t *table) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		if line == "" {
			continue
		}
		end := strings.TrimRight(line, " \n")
		if strings.HasSuffix(line, "\n") {
			end += "\n"
		}
		if _, err := io.WriteString(t.w, end); err != nil {
			return err
		}
	}
	t.buf.Reset()
	return nil
}

func partKey(topic string, p int32) string { return fmt.Sprintf("%s-%d", topic, p) }

// ids prints replica ids as kafka-topics does: "1,2,3".
func ids(v []int32) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// sortedIDs orders follower keys numerically, so 10 comes after 9.
func sortedIDs(m map[string]status.FollowerPosition) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, ea := strconv.Atoi(keys[i])
		b, eb := strconv.Atoi(keys[j])
		if ea != nil || eb != nil {
			return keys[i] < keys[j]
		}
		return a < b
	})
	return keys
}

// age rounds d for reading; a negative age (clock skew between this machine
// and the broker's) reads as "0s".
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
