package chaos

import (
	"fmt"
	"strings"

	"github.com/moonmq/moonmq/internal/checker"
)

// KnownBug names a broker bug the harness has found and that is not fixed
// yet, with the precise signature by which its anomalies are recognised.
// A run with Config.TolerateKnown reports those anomalies apart (loudly)
// instead of failing on them; anything not matching the signature still
// fails.
type KnownBug struct {
	ID      string
	Summary string
}

// FalseTruncation is the first bug the harness found (fixed in commit
// 6d20161; kept so that a run can still tell it apart should it return):
// after a failover
// the new leader answers OffsetForLeaderEpoch with the end offset of the
// consumer's epoch clamped to its own high watermark, which lags behind
// the old leader's for a moment (internal/broker/admin.go,
// handleOffsetForLeaderEpoch). A consumer that has read up to the old
// leader's high watermark is told that records below its position are
// gone, rewinds and reads them again (franz-go reports ErrDataLoss). No
// record is lost or changed; consumers see duplicates and go backwards.
var FalseTruncation = KnownBug{
	ID: "false-truncation",
	Summary: "a new leader's OffsetForLeaderEpoch answer is clamped to its lagging high watermark, " +
		"so consumers detect a truncation that did not happen and read records again",
}

// falseNotices returns the consumers' data-loss notices that were false:
// every record the consumer had read in the range it was told was lost is
// in the final leader's log, same value, same leader epoch.
func falseNotices(h checker.History, pollEpochs, dumpEpochs [][]int32, notices []lossNotice) []lossNotice {
	final, _ := finalLeaderLogs(h, dumpEpochs, true)
	var out []lossNotice
	for _, n := range notices {
		m, ok := final[tpKey{n.Topic, n.Partition}]
		if !ok || n.ResetTo >= n.ConsumedTo {
			continue
		}
		genuine, covered := false, false
		for pi, p := range h.Polls {
			if p.Consumer != n.Consumer || p.Topic != n.Topic || p.Partition != n.Partition || p.Start > n.At || pi >= len(pollEpochs) {
				continue
			}
			for ri, r := range p.Records {
				if r.Offset < n.ResetTo || r.Offset >= n.ConsumedTo {
					continue
				}
				covered = true
				f, ok := m[r.Offset]
				if !ok || f.value != r.Value || ri >= len(pollEpochs[pi]) || f.epoch != pollEpochs[pi][ri] {
					genuine = true
				}
			}
		}
		if covered && !genuine {
			out = append(out, n)
		}
	}
	return out
}

// splitKnown moves the non-monotonic polls that a false data-loss notice
// explains (same consumer, partition, and an offset in the range the
// notice called lost) out of the report.
func splitKnown(rep checker.Report, notices []lossNotice) (kept checker.Report, known []checker.Anomaly) {
	kept = checker.Report{Counts: map[checker.Kind]int{}}
	for k, n := range rep.Counts {
		kept.Counts[k] = n
	}
	for _, a := range rep.Anomalies {
		explained := false
		if a.Kind == checker.NonMonotonicPoll && len(a.Witness) >= 2 {
			for _, n := range notices {
				if n.Topic == a.Topic && n.Partition == a.Partition && a.Offset >= n.ResetTo && a.Offset < n.ConsumedTo &&
					strings.Contains(a.Witness[1], " "+n.Consumer+" ") {
					explained = true
					a.Witness = append(a.Witness, fmt.Sprintf("known bug %s: %s", FalseTruncation.ID, n.Text))
					break
				}
			}
		}
		if explained {
			known = append(known, a)
			if kept.Counts[a.Kind]--; kept.Counts[a.Kind] == 0 {
				delete(kept.Counts, a.Kind)
			}
			continue
		}
		kept.Anomalies = append(kept.Anomalies, a)
	}
	return kept, known
}
