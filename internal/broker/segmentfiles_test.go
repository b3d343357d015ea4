package broker

import (
	"testing"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// Every partition's log opens its rolled segments through the broker's one
// pool, sized by Server.MaxOpenSegmentFiles, whose counters /stats and
// /metrics show.
func TestLogSegmentFilesPooled(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.MaxOpenSegmentFiles = 2
	cfg.SegmentBytes = 1024
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.mu.Lock()
	tp, err := b.createTopicLocked("pooled", 4, nil)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: make([]byte, 300)}})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		for _, p := range tp.partitions {
			if _, err := p.Log().Append(append([]byte(nil), batch...), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	partitions := 0
	for _, t := range b.sortedTopics() {
		partitions += len(t.partitions)
	}
	for _, p := range tp.partitions {
		if p.Log().SegmentCount() < 4 {
			t.Fatalf("%d segments", p.Log().SegmentCount())
		}
		for off := int64(0); off < p.Log().EndOffset(); off++ {
			if got, err := p.Log().Read(off, 1, p.Log().EndOffset()); err != nil || len(got) != len(batch) {
				t.Fatalf("read %d: %d bytes, %v", off, len(got), err)
			}
		}
	}
	st := b.Snapshot().SegmentFiles
	if st.Limit != 2 || st.Open > int64(partitions+2) || st.Opens == 0 || st.Evictions == 0 {
		t.Fatalf("segment files %+v with %d partitions", st, partitions)
	}
	mfs, err := b.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			seen[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if seen["moonmq_segment_files_limit"] != 2 || seen["moonmq_segment_files_open"] != float64(st.Open) ||
		seen["moonmq_segment_file_opens_total"] < float64(st.Opens) || seen["moonmq_segment_file_evictions_total"] < float64(st.Evictions) {
		t.Fatalf("metrics %v, stats %+v", seen, st)
	}
	if _, ok := seen["moonmq_segment_tail_bytes"]; !ok || seen["moonmq_segment_tails"] != float64(st.Tails) {
		t.Fatalf("tail metrics %v, stats %+v", seen, st)
	}
}

func TestLogSegmentFilesDefaultLimit(t *testing.T) {
	b := openTestBroker(t)
	nofile, ok := openFileLimit()
	if !ok {
		t.Skip("no open-file limit here")
	}
	if got, want := b.Snapshot().SegmentFiles.Limit, config.DefaultMaxOpenSegmentFiles(nofile); got != want || want < 64 {
		t.Fatalf("limit %d, want %d (open-file limit %d)", got, want, nofile)
	}
}
