package txn

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/datadriven"
)

// TestMetadataScripts runs testdata/metadata: one transactional id's state
// through AddPartitions, End and Complete, each command printing the state
// it leads to or the error it answers (a refused step leaves the state as
// it was).
func TestMetadataScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/metadata", func(t *testing.T) func(*datadriven.Cmd) string {
		m := &Metadata{ID: "tx", ProducerID: 7, TimeoutMs: 60000, State: kmsg.TransactionStateEmpty, Partitions: map[TP]struct{}{}}
		return func(c *datadriven.Cmd) string {
			now := c.Int(t, "at", 0)
			var next *Metadata
			var code int16
			switch c.Name {
			case "add":
				var tps []TP
				for _, s := range strings.Split(c.Str("tps", ""), ",") {
					tps = append(tps, parseTP(t, c, s))
				}
				next, code = m.AddPartitions(tps, now)
			case "end":
				var act EndAction
				act, next, code = m.End(c.Has("commit"), now)
				if act == EndDone {
					return "done (a retry of the same decision)\n" + describe(m, now)
				}
			case "complete":
				if !m.Preparing() {
					c.Fatalf(t, "complete outside a Prepare* state")
				}
				next = m.Complete(now)
			case "check":
				code = m.CheckProducer(c.Int(t, "pid", m.ProducerID), int16(c.Int(t, "epoch", int64(m.Epoch))), c.Has("new-errors"))
				if code == 0 {
					return "ok"
				}
			case "state":
			default:
				c.Fatalf(t, "unknown command")
			}
			if code != 0 {
				return "error " + kerr.ErrorForCode(code).(*kerr.Error).Message + "\n" + describe(m, now)
			}
			if next != nil {
				m = next
			}
			return describe(m, now)
		}
	})
}

func describe(m *Metadata, now int64) string {
	var tps []string
	for _, tp := range m.SortedPartitions() {
		tps = append(tps, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
	}
	return fmt.Sprintf("%s partitions=[%s] start=%d update=%d expired=%v idle-after-1000=%v",
		StateName(m.State), strings.Join(tps, " "), m.StartMs, m.UpdateMs, m.Expired(now), m.Idle(now, 1000))
}

func parseTP(t *testing.T, c *datadriven.Cmd, s string) TP {
	topic, p, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		c.Fatalf(t, "partition %q is not topic/N", s)
	}
	return TP{Topic: topic, Partition: int32(n)}
}

// TestPartitionScripts runs testdata/partition: a data partition's
// transaction index (which producers are open, the last stable offset,
// the aborted transactions a read_committed fetch must skip) through data
// batches, markers, restarts and trimming. After a truncation the
// partition layer rebuilds the index from the log, so there is no
// truncate step here.
func TestPartitionScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/partition", func(t *testing.T) func(*datadriven.Cmd) string {
		p := NewPartition()
		return func(c *datadriven.Cmd) string {
			pid := c.Int(t, "pid", 0)
			switch c.Name {
			case "data":
				p.OnData(pid, c.Int(t, "base", 0))
			case "commit", "abort":
				typ := ControlCommit
				if c.Name == "abort" {
					typ = ControlAbort
				}
				p.OnMarker(pid, int16(c.Int(t, "epoch", 0)), typ, int32(c.Int(t, "coordinator_epoch", 0)), c.Int(t, "offset", 0))
			case "fenced":
				// Would a marker from a coordinator at this epoch be
				// refused?
				return fmt.Sprintf("fenced=%v", p.FencedMarker(pid, int32(c.Int(t, "coordinator_epoch", 0))))
			case "trim":
				p.TrimBelow(c.Int(t, "start", 0))
			case "restart":
				// A snapshot and a load: what a restart keeps.
				q, err := LoadPartition(p.Snapshot())
				if err != nil {
					c.Fatalf(t, "load: %v", err)
				}
				p = q
			case "lso":
				return fmt.Sprintf("lso=%d", p.LSO(c.Int(t, "hw", 0)))
			case "aborted":
				var out []string
				for _, a := range p.AbortedIn(c.Int(t, "from", 0), c.Int(t, "to", 0)) {
					out = append(out, fmt.Sprintf("pid=%d first=%d last=%d", a.ProducerID, a.FirstOffset, a.LastOffset))
				}
				if len(out) == 0 {
					return "none"
				}
				return strings.Join(out, "\n")
			default:
				c.Fatalf(t, "unknown command")
			}
			return fmt.Sprintf("open=%v empty=%v", p.OpenTransactions(), p.Empty())
		}
	})
}
