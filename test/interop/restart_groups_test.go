package interop

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
)

// restartableBroker runs a broker on a fixed loopback port and data
// directory, so a test can stop it and start it again where clients expect
// it.
type restartableBroker struct {
	t   *testing.T
	cfg config.Server
	in  *app.Instance
}

func newRestartableBroker(t *testing.T) *restartableBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := config.Default()
	cfg.Port, cfg.MetricsPort, cfg.DataDir = port, 0, t.TempDir()
	rb := &restartableBroker{t: t, cfg: cfg}
	rb.start()
	t.Cleanup(func() { rb.in.Close() })
	return rb
}

func (rb *restartableBroker) start() {
	rb.t.Helper()
	in, err := app.Start(rb.cfg, slog.New(slog.NewTextHandler(newTestLog(rb.t, ""), &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		rb.t.Fatal(err)
	}
	rb.in = in
}

func (rb *restartableBroker) restart() {
	rb.t.Helper()
	if err := rb.in.Close(); err != nil {
		rb.t.Fatal(err)
	}
	rb.start()
}

func (rb *restartableBroker) addr() string { return rb.in.Addr() }

// TestGroupsResumeAfterBrokerRestart: a sarama, a librdkafka and a kafka-go
// group commit, the broker restarts, and each group resumes exactly from
// its committed offsets (only records produced after the restart arrive).
func TestGroupsResumeAfterBrokerRestart(t *testing.T) {
	rb := newRestartableBroker(t)
	const topic, partitions = "restart-groups", int32(3)
	saramaCreateTopic(t, rb.addr(), topic, partitions)
	before := keyRange("before", 0, 30)
	saramaProduceKeys(t, rb.addr(), topic, partitions, before)

	sm := startGroupMember(t, sarama.V2_8_0_0, rb.addr(), "sarama-restart", topic, "before")
	waitFor(t, 30*time.Second, "sarama reads the first records", func() bool { return sm.seenCount() >= len(before) })
	sm.close(t)

	py := python(t)
	first := runRdkGroups(t, py, "group", rb.addr(), topic, "rdk-restart", "30")
	sameKeys(t, "librdkafka before the restart", first.Consumed, before)
	kg := startKafkaGoGroupReader(t, rb.addr(), "kgo-restart", topic, "before")
	kg.waitKeys(t, len(before))
	kg.close(t)

	rb.restart()
	after := keyRange("after", 0, 6)
	saramaProduceKeys(t, rb.addr(), topic, partitions, after)

	sm = startGroupMember(t, sarama.V2_8_0_0, rb.addr(), "sarama-restart", topic, "after")
	waitFor(t, 30*time.Second, "sarama reads the new records", func() bool { return sm.seenCount() >= len(after) })
	sm.close(t)
	if sm.seenCount() != len(after) {
		t.Fatalf("sarama after the restart read %d records (%v), want exactly the %d new ones", sm.seenCount(), sm.order, len(after))
	}
	for _, k := range sm.order {
		if k[:5] != "after" {
			t.Fatalf("sarama re-read %q after the restart: committed offsets were lost", k)
		}
	}

	second := runRdkGroups(t, py, "group", rb.addr(), topic, "rdk-restart", "6")
	sameKeys(t, "librdkafka after the restart", second.Consumed, after)
	kg = startKafkaGoGroupReader(t, rb.addr(), "kgo-restart", topic, "after")
	kg.waitKeys(t, len(after))
	got := kg.keys()
	kg.close(t)
	if len(got) != len(after) {
		t.Fatalf("kafka-go after the restart read %d records (%v), want exactly the %d new ones", len(got), got, len(after))
	}
	for _, k := range got {
		if k[:5] != "after" {
			t.Fatalf("kafka-go re-read %q after the restart: committed offsets were lost", k)
		}
	}
}

// waitKeys waits (bounded) until the reader holds n records.
func (g *kgoGroupReader) waitKeys(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(g.keys()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: read %d records, want %d", g.name, len(g.keys()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
