package app_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/broker"
	"github.com/moonmq/moonmq/internal/config"
)

// TestCleanShutdownMarkerChecksLogEnds: the clean-shutdown marker vouches
// for the logs only as they were left. A segment cut while the broker was
// down (a damaged disk, a restored backup) makes the start unclean, so a
// failover replica must catch up before it may lead (the fault harness's
// corrupt-elect scenario lost acknowledged records without this).
func TestCleanShutdownMarkerChecksLogEnds(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "m", 1, nil)
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("m"))
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("0123456789")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	in.Close()

	open := func() *broker.Broker {
		cfg := config.Default()
		cfg.DataDir = dir
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		b, err := broker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// As left: clean.
	b := open()
	clean, err := b.ConsumeCleanShutdown()
	if err != nil || !clean {
		t.Fatalf("untouched logs after a clean stop: clean=%v err=%v", clean, err)
	}
	b.Close()
	if err := b.MarkCleanShutdown(); err != nil {
		t.Fatal(err)
	}

	// Cut the last record's bytes off the segment.
	segs, _ := filepath.Glob(filepath.Join(dir, "topics", "m", "0", "*.log"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	st, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[0], st.Size()-20); err != nil {
		t.Fatal(err)
	}
	b = open()
	defer b.Close()
	if clean, err := b.ConsumeCleanShutdown(); err != nil || clean {
		t.Fatalf("a log cut after the clean stop counted as clean: clean=%v err=%v", clean, err)
	}
}
