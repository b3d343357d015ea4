package chaos

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/checker"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// dumpReplica reads every partition of topics its group owns (owned) from
// a stopped replica's data directory. hw is the final high watermark to
// report for each partition (by "topic/partition"); leader marks the
// final leader's dumps. The second result holds each dump's batch epochs,
// record by record.
func dumpReplica(r *testcluster.Replica, topics map[string]int32, owned func(string, int32) bool, hw map[string]int64, leader bool) ([]checker.Dump, [][]int32, []string) {
	var out []checker.Dump
	var epochs [][]int32
	var problems []string
	for t, n := range topics {
		for p := range n {
			if !owned(t, p) {
				continue
			}
			data, start, _, err := r.ReadLog(t, p)
			if err != nil {
				problems = append(problems, fmt.Sprintf("replica %d: read %s/%d: %v", r.ID, t, p, err))
				continue
			}
			recs, eps, err := decodeWithControl(data)
			if err != nil {
				problems = append(problems, fmt.Sprintf("replica %d: decode %s/%d: %v", r.ID, t, p, err))
			}
			h, ok := hw[fmt.Sprintf("%s/%d", t, p)]
			if !ok {
				h = -1
			}
			out = append(out, checker.Dump{Replica: fmt.Sprint(r.ID), Topic: t, Partition: p, LogStart: start,
				Records: recs, HW: h, Leader: leader})
			epochs = append(epochs, eps)
		}
	}
	return out, epochs, problems
}

// decodeWithControl decodes stored batches into checker records, the
// transaction markers included (marked Control), so that an acknowledged
// record claimed at a marker's offset is seen as inconsistent, with each
// record's batch leader epoch.
func decodeWithControl(data []byte) ([]checker.Record, []int32, error) {
	if len(data) == 0 {
		return nil, nil, nil
	}
	batches, err := recordbatch.Split(data)
	if err != nil {
		return nil, nil, err
	}
	var out []checker.Record
	var epochs []int32
	for _, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return out, epochs, err
		}
		recs, err := recordbatch.Records(b, 64<<20)
		if err != nil {
			return out, epochs, fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
		}
		for _, r := range recs {
			out = append(out, checker.Record{Offset: r.Offset, Value: string(r.Value), Control: h.Control()})
			epochs = append(epochs, h.PartitionLeaderEpoch)
		}
	}
	return out, epochs, nil
}

// dumpOffsetCommits reads the committed-offset records of one partition
// of __consumer_offsets from a stopped replica's data directory (group-
// metadata records, tombstones and transaction markers are skipped).
func dumpOffsetCommits(r *testcluster.Replica, partition int32) ([]checker.LoggedCommit, error) {
	data, _, _, err := r.ReadLog("__consumer_offsets", partition)
	if err != nil || len(data) == 0 {
		return nil, err
	}
	var out []checker.LoggedCommit
	for len(data) >= recordbatch.LengthOverhead {
		h, err := recordbatch.ParseHeader(data)
		if err != nil || h.Size() > len(data) {
			return out, fmt.Errorf("__consumer_offsets batch: %v", err)
		}
		b := data[:h.Size()]
		data = data[h.Size():]
		if h.Control() {
			continue
		}
		recs, err := recordbatch.Records(b, 64<<20)
		if err != nil {
			return out, fmt.Errorf("__consumer_offsets batch at %d: %w", h.BaseOffset, err)
		}
		for _, rec := range recs {
			var k kmsg.OffsetCommitKey
			if rec.Value == nil || k.ReadFrom(rec.Key) != nil || k.Version > 1 {
				continue
			}
			var v kmsg.OffsetCommitValue
			if v.ReadFrom(rec.Value) != nil {
				continue
			}
			out = append(out, checker.LoggedCommit{Group: k.Group, Topic: k.Topic, Partition: k.Partition,
				Offset: v.Offset, Metadata: v.Metadata, LogOffset: rec.Offset, Epoch: h.PartitionLeaderEpoch})
		}
	}
	return out, nil
}
