package chaos

import (
	"fmt"

	"github.com/moonmq/moonmq/internal/checker"
)

// RewrittenRead is the harness's own anomaly kind, beside the checker's:
// a consumer read (offset, value) in a batch of leader epoch e, and the
// final leader holds the same value at the same offset in a batch of
// another epoch. A batch keeps the epoch of the leader that appended it,
// on every replica and forever, so the copy the consumer read was
// truncated away and the value was appended again (a producer's retry on
// the new leader). Values alone cannot show it; when the read was below
// the high watermark it is a committed record taken back.
const RewrittenRead checker.Kind = "rewritten-read"

// EpochRegression is the harness's other anomaly kind: in a final
// leader's log a batch carries a lower leader epoch than a batch before
// it. Epochs rise within a group with its term, and across a move between
// groups with the epoch base the cut-over sets; a fall means two owners
// wrote the partition in epochs clients could not tell apart.
const EpochRegression checker.Kind = "epoch-regression"

// TwoOwnersOneEpoch is the harness's third anomaly kind: brokers of two
// replication groups were each seen serving one partition at the same
// leader epoch. Clients tell owners apart by epoch (KIP-320): a move's
// cut-over gives the new owner an epoch above every epoch of the old
// one, and the old one's fence stops it first, so each epoch of a
// partition belongs to one group.
const TwoOwnersOneEpoch checker.Kind = "two-owners-one-epoch"

// checkOwnersPerEpoch finds every partition and epoch that brokers of
// more than one group claimed to serve: one anomaly per pair.
func checkOwnersPerEpoch(claims []ownerClaim) []checker.Anomaly {
	type key struct {
		topic     string
		partition int32
		epoch     int32
	}
	first := map[key]ownerClaim{}
	reported := map[key]bool{}
	var out []checker.Anomaly
	for _, c := range claims {
		k := key{c.Topic, c.Partition, c.Epoch}
		f, seen := first[k]
		switch {
		case !seen:
			first[k] = c
		case f.Group != c.Group && !reported[k]:
			reported[k] = true
			out = append(out, checker.Anomaly{Kind: TwoOwnersOneEpoch, Topic: c.Topic, Partition: c.Partition, Offset: -1,
				Witness: []string{
					fmt.Sprintf("replica %d of g%d served %s/%d at leader epoch %d [t=%.1fs]", f.Replica, f.Group+1, c.Topic, c.Partition, c.Epoch, f.At.Seconds()),
					fmt.Sprintf("replica %d of g%d served it at the same epoch [t=%.1fs]", c.Replica, c.Group+1, c.At.Seconds()),
				}})
		}
	}
	return out
}

// checkEpochOrder finds every final leader's log whose batch epochs fall
// somewhere (dumpEpochs runs parallel to h.Dumps): one anomaly per
// partition, at the first fall.
func checkEpochOrder(h checker.History, dumpEpochs [][]int32) []checker.Anomaly {
	var out []checker.Anomaly
	for di, d := range h.Dumps {
		if !d.Leader || di >= len(dumpEpochs) {
			continue
		}
		eps := dumpEpochs[di]
		for i := 1; i < len(eps) && i < len(d.Records); i++ {
			if eps[i] < eps[i-1] {
				out = append(out, checker.Anomaly{Kind: EpochRegression, Topic: d.Topic, Partition: d.Partition, Offset: d.Records[i].Offset, Value: d.Records[i].Value,
					Witness: []string{fmt.Sprintf("replica %s's final log holds offset %d in a batch of leader epoch %d after offset %d in a batch of epoch %d",
						d.Replica, d.Records[i].Offset, eps[i], d.Records[i-1].Offset, eps[i-1])}})
				break
			}
		}
	}
	return out
}

// checkEpochs compares the leader epoch of every polled record with the
// final leader's copy. pollEpochs and dumpEpochs run parallel to
// h.Polls and h.Dumps.
func checkEpochs(h checker.History, pollEpochs, dumpEpochs [][]int32, max int) (out []checker.Anomaly, count int) {
	final, finalOf := finalLeaderLogs(h, dumpEpochs, false)
	seen := map[string]bool{}
	for pi, p := range h.Polls {
		if pi >= len(pollEpochs) {
			break
		}
		m := final[tpKey{p.Topic, p.Partition}]
		for ri, r := range p.Records {
			f, ok := m[r.Offset]
			if !ok || f.value != r.Value || ri >= len(pollEpochs[pi]) || pollEpochs[pi][ri] == f.epoch {
				continue
			}
			k := fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, r.Offset)
			if seen[k] {
				continue
			}
			seen[k] = true
			count++
			if max > 0 && len(out) >= max {
				continue
			}
			where := "at or above"
			if p.HW < 0 || r.Offset < p.HW {
				where = "below"
			}
			out = append(out, checker.Anomaly{Kind: RewrittenRead, Topic: p.Topic, Partition: p.Partition, Offset: r.Offset, Value: r.Value,
				Witness: []string{
					fmt.Sprintf("poll #%d %s read offset=%d value=%q in a batch of leader epoch %d, %s the high watermark %d it reported [t=%d..%d]",
						pi, p.Consumer, r.Offset, r.Value, pollEpochs[pi][ri], where, p.HW, p.Start, p.End),
					fmt.Sprintf("the final leader %s holds the same value at offset %d in a batch of leader epoch %d: the copy read was truncated and the value appended again",
						finalOf[tpKey{p.Topic, p.Partition}], r.Offset, f.epoch),
				}})
		}
	}
	return out, count
}

// tpKey names a partition in the harness's own checks.
type tpKey struct {
	topic string
	part  int32
}

// held is a record of the final leader's log: its value and its batch's
// leader epoch.
type held struct {
	value string
	epoch int32
}

// finalLeaderLogs indexes the final leader's dumps by partition and
// offset, with each record's batch epoch (dumpEpochs runs parallel to
// h.Dumps); control records only withControl. The second result names the
// replica each partition's dump came from.
func finalLeaderLogs(h checker.History, dumpEpochs [][]int32, withControl bool) (map[tpKey]map[int64]held, map[tpKey]string) {
	final := map[tpKey]map[int64]held{}
	from := map[tpKey]string{}
	for di, d := range h.Dumps {
		if !d.Leader || di >= len(dumpEpochs) {
			continue
		}
		m := make(map[int64]held, len(d.Records))
		for ri, r := range d.Records {
			if (withControl || !r.Control) && ri < len(dumpEpochs[di]) {
				m[r.Offset] = held{r.Value, dumpEpochs[di][ri]}
			}
		}
		final[tpKey{d.Topic, d.Partition}] = m
		from[tpKey{d.Topic, d.Partition}] = d.Replica
	}
	return final, from
}
