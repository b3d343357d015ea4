package replication_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
)

// raftISR is the committed ISR a replica's status reports.
func raftISR(t *testing.T, n *node) []int {
	t.Helper()
	raft, _ := status(t, n)["raft"].(map[string]any)
	var out []int
	if raft["has_isr"] != true {
		return nil
	}
	list, _ := raft["isr"].([]any)
	for _, v := range list {
		out = append(out, int(v.(float64)))
	}
	return out
}

// waitISR waits until replica n reports the committed ISR want.
func waitISR(t *testing.T, n *node, want []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := raftISR(t, n)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: ISR %v, want %v", n.id, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produceCode sends one record to partition 0 of topic with acks and
// returns the partition's error code. (franz-go sends a raw produce with
// its client's acks, so acks=1 gets a client of its own.)
func produceCode(t *testing.T, cl *kgo.Client, leader int, topic string, acks int16) int16 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if acks == 1 {
		seeds := cl.OptValues(kgo.SeedBrokers)[0].([]string)
		cl = client(t, seeds[0], kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	req := rawProduce(t, topic, 0, 10000)
	req.Acks = acks
	resp, err := cl.Broker(leader).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// highWatermark is the latest offset ListOffsets reports for partition 0.
func highWatermark(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v %v", topic, ok, o.Err)
	}
	return o.Offset
}

// TestMinInsyncReplicas: in failover mode a topic's min.insync.replicas
// (default: a majority of the group) refuses acks=all produce with
// NOT_ENOUGH_REPLICAS while the group's ISR is smaller, answers a write
// already appended NOT_ENOUGH_REPLICAS_AFTER_APPEND, and holds the high
// watermark (KIP-966) until the ISR or the setting allows it again; other
// topics keep going.
func TestMinInsyncReplicas(t *testing.T) {
	ns, _ := failoverGroupWith(t, func(c *config.Server) { c.Acks = "all" })
	ctx := context.Background()
	leader := servingLeader(t, ns, 0, 60*time.Second)
	if leader.id != 1 {
		t.Fatalf("replica %d leads first; want 1", leader.id)
	}
	waitISR(t, leader, []int{1, 2, 3}, 60*time.Second)

	cl := client(t, leader.addr(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(30*time.Second))
	adm := kadm.NewClient(cl)
	one, three := "1", "3"
	for topic, cfg := range map[string]map[string]*string{
		"min-default": nil,
		"min-one":     {"min.insync.replicas": &one},
		"min-three":   {"min.insync.replicas": &three},
	} {
		if _, err := adm.CreateTopic(ctx, 1, 3, cfg, topic); err != nil {
			t.Fatal(err)
		}
	}
	// Any replica answers DescribeConfigs: retry until the one asked has
	// copied the topic.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dc, err := adm.DescribeTopicConfigs(ctx, "min-default")
		if err == nil {
			v, err := dc.On("min-default", nil)
			if err == nil && v.Err == nil {
				if !slices.ContainsFunc(v.Configs, func(c kadm.Config) bool {
					return c.Key == "min.insync.replicas" && c.Value != nil && *c.Value == "2"
				}) {
					t.Fatalf("min-default: min.insync.replicas is not 2 (a majority of 3): %+v", v.Configs)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("describe min-default: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, topic := range []string{"min-default", "min-one", "min-three"} {
		if code := produceCode(t, cl, leader.id, topic, -1); code != 0 {
			t.Fatalf("%s with the whole group in sync: error %d", topic, code)
		}
	}

	// One replica gone: the ISR shrinks to two.
	ns[2].stop()
	waitISR(t, leader, []int{1, 2}, 60*time.Second)
	for topic, want := range map[string]int16{"min-default": 0, "min-one": 0, "min-three": 19} {
		if code := produceCode(t, cl, leader.id, topic, -1); code != want {
			t.Fatalf("%s with ISR 1,2: acks=all error %d, want %d", topic, code, want)
		}
	}
	// acks=1 is not checked before the append (as in Kafka), but
	// Server.Acks "all" makes it wait for the high watermark, which
	// min-three holds: the answer comes at once, not after AckTimeout.
	_, endBefore, err := leader.in.Broker.ReadLog("min-three", 0)
	if err != nil {
		t.Fatal(err)
	}
	if code := produceCode(t, cl, leader.id, "min-three", 1); code != 20 {
		t.Fatalf("min-three acks=1 under Server.Acks all with ISR 1,2: error %d, want 20 (NOT_ENOUGH_REPLICAS_AFTER_APPEND)", code)
	}
	_, end, _ := leader.in.Broker.ReadLog("min-three", 0)
	if end != endBefore+1 {
		t.Fatalf("min-three log end %d, want %d (the record was appended)", end, endBefore+1)
	}
	if hw := highWatermark(t, adm, "min-three"); hw != endBefore {
		t.Fatalf("min-three high watermark %d with ISR below its minimum, want %d", hw, endBefore)
	}

	// Lowering the topic's minimum releases the held high watermark.
	two := "2"
	// franz-go may send it to a follower, which answers NOT_CONTROLLER.
	deadline = time.Now().Add(30 * time.Second)
	for {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: &two}}, "min-three")
		if err == nil && rs[0].Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	for highWatermark(t, adm, "min-three") != end {
		if time.Now().After(deadline) {
			t.Fatalf("min-three high watermark stuck below %d after lowering min.insync.replicas", end)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := produceCode(t, cl, leader.id, "min-three", -1); code != 0 {
		t.Fatalf("min-three with min 2 and ISR 1,2: error %d", code)
	}

	// The replica returns and the ISR is whole again.
	ns[2].start(t, &testLog{t: t, done: true})
	waitISR(t, leader, []int{1, 2, 3}, 60*time.Second)
}

// TestMinInsyncReplicasSingleNodeAndStatic: outside failover mode the
// default stays Kafka's 1; a topic asking for more replicas than can be in
// sync gets NOT_ENOUGH_REPLICAS for acks=all (a single node is one
// replica; a static group of three cannot reach four), acks=1 is served.
func TestMinInsyncReplicasSingleNodeAndStatic(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.Port = freePort(t)
	cfg.Host = "127.0.0.1"
	cfg.MetricsPort = 0
	cfg.DataDir = t.TempDir()
	in, err := app.Start(cfg, slog.New(slog.NewTextHandler(&testLog{t: t, done: true}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	single := &node{id: 0, cfg: cfg, in: in}
	cl := client(t, single.addr())
	adm := kadm.NewClient(cl)
	two := "2"
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"min.insync.replicas": &two}, "two"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx)
	if err != nil || len(md.Brokers) != 1 {
		t.Fatalf("metadata: %v %v", md.Brokers, err)
	}
	id := int(md.Brokers[0].NodeID)
	for _, c := range []struct {
		topic string
		acks  int16
		want  int16
	}{{"plain", -1, 0}, {"two", -1, 19}, {"two", 1, 0}} {
		if code := produceCode(t, cl, id, c.topic, c.acks); code != c.want {
			t.Fatalf("single node, %s acks=%d: error %d, want %d", c.topic, c.acks, code, c.want)
		}
	}

	ns := group(t, 0)
	scl := client(t, ns[0].addr())
	sadm := kadm.NewClient(scl)
	four := "4"
	if _, err := sadm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &two}, "static-two"); err != nil {
		t.Fatal(err)
	}
	if _, err := sadm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &four}, "static-four"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic string
		want  int16
	}{{"static-two", 0}, {"static-four", 19}} {
		if code := produceCode(t, scl, 1, c.topic, -1); code != c.want {
			t.Fatalf("static group, %s acks=all: error %d, want %d", c.topic, code, c.want)
		}
	}
}
