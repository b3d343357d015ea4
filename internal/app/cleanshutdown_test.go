package app_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
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

	open := func() *broker.Broker { return openBroker(t, dir) }
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

// TestDamageFoundAtStart: damage that a start finds is reported
// (Broker.LogDamaged, which makes a failover replica wait for a leader to
// catch up from) and never stops the broker from starting: a log cut
// below its checkpointed recovery point after a crash, and a bit flip in
// an older segment after a clean stop (every start checks every segment
// and cuts the log at the damage).
func TestDamageFoundAtStart(t *testing.T) {
	open := openBroker
	fill := func(t *testing.T, dir string, configs map[string]*string) {
		in := startBroker(t, dir)
		createTopic(t, in.Addr(), "d", 1, configs)
		cl := client(t, in.Addr(), kgo.DefaultProduceTopic("d"), kgo.ProducerLinger(0))
		for i := 0; i < 40; i++ {
			if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: make([]byte, 100)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
		in.Close() // writes the recovery points and the clean-shutdown marker
	}
	segments := func(t *testing.T, dir string) []string {
		segs, _ := filepath.Glob(filepath.Join(dir, "topics", "d", "0", "*.log"))
		return segs
	}

	t.Run("cut below the recovery point after a crash", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, nil)
		// A crash: no marker. The recovery point says what was durable.
		if err := os.Remove(filepath.Join(dir, broker.CleanShutdownFile)); err != nil {
			t.Fatal(err)
		}
		segs := segments(t, dir)
		st, _ := os.Stat(segs[len(segs)-1])
		if err := os.Truncate(segs[len(segs)-1], st.Size()-500); err != nil {
			t.Fatal(err)
		}
		b := open(t, dir)
		defer b.Close()
		if !b.LogDamaged() {
			t.Fatal("a log cut below its recovery point was not reported damaged")
		}
	})

	t.Run("bit flip in an older segment after a clean stop", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, map[string]*string{"segment.bytes": kadm.StringPtr("1024")})
		segs := segments(t, dir)
		if len(segs) < 3 {
			t.Fatalf("want several segments, got %v", segs)
		}
		data, err := os.ReadFile(segs[0])
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-10] ^= 0x40 // inside the last batch's records: its CRC fails
		if err := os.WriteFile(segs[0], data, 0o644); err != nil {
			t.Fatal(err)
		}
		b := open(t, dir)
		defer b.Close()
		if _, err := b.ConsumeCleanShutdown(); err != nil {
			t.Fatal(err)
		}
		if !b.LogDamaged() {
			t.Fatal("a damaged older segment was not reported")
		}
		if n := len(segments(t, dir)); n != 1 {
			t.Fatalf("the log was not cut at the damage: %d segments left", n)
		}
	})

	t.Run("untouched", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, map[string]*string{"segment.bytes": kadm.StringPtr("1024")})
		if err := os.Remove(filepath.Join(dir, broker.CleanShutdownFile)); err != nil {
			t.Fatal(err)
		}
		b := open(t, dir)
		defer b.Close()
		if b.LogDamaged() {
			t.Fatal("an untouched log after a crash reported damaged")
		}
	})
}

// openBroker opens a single-node broker on dir without serving it.
func openBroker(t *testing.T, dir string) *broker.Broker {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dir
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("open the broker on %s: %v", dir, err)
	}
	return b
}
