//go:build unix

package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

// client returns a franz-go client on bootstrap, closed when the test ends.
func client(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.AllowAutoTopicCreation(),
		// A failover moves the leader: look again soon, retry long.
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryTimeout(60 * time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceOne writes one record with acks=all (franz-go's default) and
// waits for the acknowledgement.
func produceOne(t *testing.T, bootstrap, topic, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client(t, bootstrap)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// consumeOne reads topic from the start until it sees one record.
func consumeOne(t *testing.T, bootstrap, topic string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client(t, bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: no record: %v", topic, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s[%d]: %v", topic, p, err) })
		if recs := fs.Records(); len(recs) > 0 {
			return string(recs[0].Value)
		}
	}
}

func roundTrip(t *testing.T, bootstrap string) {
	t.Helper()
	topic := fmt.Sprintf("testenv-%d", time.Now().UnixNano())
	produceOne(t, bootstrap, topic, "hello")
	if got := consumeOne(t, bootstrap, topic); got != "hello" {
		t.Fatalf("consumed %q, want hello", got)
	}
}

func TestMoonMQSingle(t *testing.T) {
	c := MoonMQ(t, 1)
	if got := c.Leader(time.Second); got != 1 {
		t.Fatalf("Leader = %d, want 1", got)
	}
	roundTrip(t, c.Bootstrap())
}

func TestMoonMQGroupFailover(t *testing.T) {
	c := MoonMQ(t, 3)
	if len(c.Addrs()) != 3 || strings.Count(c.Bootstrap(), ",") != 2 {
		t.Fatalf("Addrs %v, Bootstrap %q", c.Addrs(), c.Bootstrap())
	}
	old := c.Leader(30 * time.Second)
	// Acknowledged by the whole ISR before the leader dies, so the new
	// leader must have it.
	produceOne(t, c.Bootstrap(), "failover", "before")

	killed := time.Now()
	c.Kill(old)
	now := c.Leader(30 * time.Second)
	if now == old {
		t.Fatalf("leader %d still reported after its kill", old)
	}
	t.Logf("replica %d took over from %d within %v", now, old, time.Since(killed).Round(time.Millisecond))
	if got := consumeOne(t, c.Bootstrap(), "failover"); got != "before" {
		t.Fatalf("after failover consumed %q, want before", got)
	}

	c.Start(old)
	c.WaitHealthy(60 * time.Second)
}

func TestApacheKafka(t *testing.T) {
	k := ApacheKafka(t)
	roundTrip(t, k.Bootstrap())
}

func TestProcess(t *testing.T) {
	bin := BuildBinary(t, "./internal/testenv/testdata/sleeper")
	if again := BuildBinary(t, "./internal/testenv/testdata/sleeper"); again != bin {
		t.Fatalf("built twice: %s, %s", bin, again)
	}
	p := StartProcess(t, bin, nil, []string{"GREETING=stoat"})
	if !p.WaitLog(10*time.Second, "up stoat") {
		t.Fatalf("no greeting in %q", p.Log())
	}
	p.Pause()
	p.Resume()
	if !p.Stop(10 * time.Second) {
		t.Fatalf("did not stop on SIGTERM: %q", p.Log())
	}
	if exited, err := p.Wait(time.Second); !exited || err != nil {
		t.Fatalf("Wait = %v, %v", exited, err)
	}
	if !strings.Contains(p.Log(), "bye") || !p.Exited() {
		t.Fatalf("log %q, exited %v", p.Log(), p.Exited())
	}

	q := StartProcess(t, bin, nil, nil)
	q.Kill()
	if exited, err := q.Wait(time.Second); !exited || err == nil {
		t.Fatalf("after Kill: Wait = %v, %v", exited, err)
	}
}
