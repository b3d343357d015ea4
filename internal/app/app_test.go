package app_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// startBroker runs an in-process broker on loopback with a fresh data
// directory (or dir, to restart over existing data).
func startBroker(t *testing.T, dir string, edit ...func(*config.Server)) *app.Instance {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := config.Default()
	cfg.Port = 0
	cfg.MetricsPort = 0
	cfg.DataDir = dir
	for _, e := range edit {
		e(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	in, err := app.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	// Stop the broker's background loops before the test (and its data
	// directory) goes away.
	t.Cleanup(func() { in.Close() })
	return in
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func client(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createTopic(t *testing.T, addr, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm := kadm.NewClient(client(t, addr))
	resp, err := adm.CreateTopic(ctxT(t), partitions, 1, configs, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
}

// consumeAll reads n records from the start of topic.
func consumeAll(t *testing.T, addr, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	opts = append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)
	cl := client(t, addr, opts...)
	ctx := ctxT(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), n, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func TestRoundTripEveryCodec(t *testing.T) {
	in := startBroker(t, "")
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "codec-" + name
			createTopic(t, in.Addr(), topic, 4, nil)
			cl := client(t, in.Addr(), kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			const n = 400
			var recs []*kgo.Record
			for i := 0; i < n; i++ {
				recs = append(recs, &kgo.Record{
					Partition: int32(i % 4),
					Key:       []byte(fmt.Sprintf("key-%d", i)),
					Value:     bytes.Repeat([]byte{byte(i)}, 100+i),
					Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}},
				})
			}
			if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			got := consumeAll(t, in.Addr(), topic, n)
			if len(got) != n {
				t.Fatalf("got %d records, want %d", len(got), n)
			}
			next := map[int32]int64{}
			for _, r := range got {
				var i int
				fmt.Sscanf(string(r.Key), "key-%d", &i)
				if r.Partition != int32(i%4) || !bytes.Equal(r.Value, bytes.Repeat([]byte{byte(i)}, 100+i)) ||
					len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i) {
					t.Fatalf("record %d came back wrong: partition %d, %d-byte value, headers %v", i, r.Partition, len(r.Value), r.Headers)
				}
				if r.Offset != next[r.Partition] {
					t.Fatalf("partition %d: offset %d, want %d (order lost)", r.Partition, r.Offset, next[r.Partition])
				}
				next[r.Partition]++
			}
		})
	}
}

func TestLongPollWakesOnProduce(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "lp", 1, nil)
	cons := client(t, in.Addr(), kgo.ConsumeTopics("lp"), kgo.FetchMaxWait(10*time.Second))
	got := make(chan *kgo.Record, 1)
	go func() {
		fs := cons.PollFetches(ctxT(t))
		if rs := fs.Records(); len(rs) > 0 {
			got <- rs[0]
		}
	}()
	time.Sleep(500 * time.Millisecond) // let the fetch park
	start := time.Now()
	prod := client(t, in.Addr())
	if err := prod.ProduceSync(ctxT(t), &kgo.Record{Topic: "lp", Value: []byte("wake")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if string(r.Value) != "wake" {
			t.Fatalf("got %q", r.Value)
		}
		t.Logf("woke %v after produce", time.Since(start))
	case <-time.After(8 * time.Second):
		t.Fatal("a parked fetch was not woken by a produce")
	}
}

func TestFetchMaxWaitAnswersEmpty(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "empty", 1, nil)
	cl := client(t, in.Addr())
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 300
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "empty"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	md, err := kadm.NewClient(cl).Metadata(ctxT(t), "empty")
	if err != nil {
		t.Fatal(err)
	}
	rt.TopicID = md.Topics["empty"].ID
	req.Topics = append(req.Topics, rt)
	start := time.Now()
	resp, err := req.RequestWith(ctxT(t), cl)
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("an empty fetch answered after %v, before MaxWaitMs", waited)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 ||
		len(resp.Topics[0].Partitions[0].RecordBatches) != 0 {
		t.Fatalf("unexpected answer %+v", resp)
	}
}

func TestRestartKeepsRecords(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "keep", 3, map[string]*string{"retention.ms": kadm.StringPtr("86400000")})
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("keep"))
	for i := 0; i < 300; i++ {
		cl.Produce(ctxT(t), &kgo.Record{Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	in.Close()

	in = startBroker(t, dir)
	defer in.Close()
	got := consumeAll(t, in.Addr(), "keep", 300)
	seen := map[string]bool{}
	for _, r := range got {
		seen[string(r.Value)] = true
	}
	if len(seen) != 300 {
		t.Fatalf("after restart %d distinct records, want 300", len(seen))
	}
	adm := kadm.NewClient(client(t, in.Addr()))
	rc, err := adm.DescribeTopicConfigs(ctxT(t), "keep")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On("keep", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range c.Configs {
		if kv.Key == "retention.ms" && kv.MaybeValue() != "86400000" {
			t.Fatalf("retention.ms after restart: %q", kv.MaybeValue())
		}
	}
}

func TestAdminAPIs(t *testing.T) {
	in := startBroker(t, "", func(s *config.Server) { s.RetentionCheckMs = 50 })
	adm := kadm.NewClient(client(t, in.Addr()))
	ctx := ctxT(t)

	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "adm"); err != nil {
		t.Fatal(err)
	}
	resp, err := adm.CreateTopic(ctx, 2, 1, nil, "adm")
	if err == nil && resp.Err == nil || !(errorsIs(err, kerr.TopicAlreadyExists) || errorsIs(resp.Err, kerr.TopicAlreadyExists)) {
		t.Fatalf("second create: %v %v", err, resp.Err)
	}
	if r, _ := adm.CreateTopic(ctx, 1, 3, nil, "rf3"); !errorsIs(r.Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("replication factor 3 on one broker: %v", r.Err)
	}
	if r, _ := adm.CreateTopic(ctx, 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, "badcfg"); !errorsIs(r.Err, kerr.InvalidConfig) {
		t.Fatalf("unknown config: %v", r.Err)
	}
	if r, _ := adm.CreateTopic(ctx, 1, 1, nil, "bad/name"); !errorsIs(r.Err, kerr.InvalidTopicException) {
		t.Fatalf("bad name: %v", r.Err)
	}

	// CreatePartitions grows the topic; metadata shows it.
	if _, err := adm.CreatePartitions(ctx, 3, "adm"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(md.Topics["adm"].Partitions); n != 5 {
		t.Fatalf("after CreatePartitions: %d partitions, want 5", n)
	}
	if p := md.Topics["adm"].Partitions[0]; p.Leader != 1 || len(p.Replicas) != 1 || len(p.ISR) != 1 {
		t.Fatalf("partition metadata %+v", p)
	}

	// IncrementalAlterConfigs, then DescribeConfigs shows the new values.
	alter, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "retention.ms", Value: kadm.StringPtr("3600000")},
		{Name: "segment.bytes", Value: kadm.StringPtr("1048576")},
		{Name: "max.message.bytes", Value: kadm.StringPtr("2000")},
		{Name: "retention.bytes", Value: kadm.StringPtr("5000000")},
		{Name: "cleanup.policy", Value: kadm.StringPtr("compact,delete")},
	}, "adm")
	if err != nil || alter[0].Err != nil {
		t.Fatalf("alter: %v %v", err, alter)
	}
	bad, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.bytes", Value: kadm.StringPtr("x")}}, "adm")
	if len(bad) != 1 || !errorsIs(bad[0].Err, kerr.InvalidConfig) {
		t.Fatalf("bad value accepted: %v", bad)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"retention.ms": "3600000", "segment.bytes": "1048576", "max.message.bytes": "2000",
		"retention.bytes": "5000000", "cleanup.policy": "compact,delete"}
	for _, kv := range rc[0].Configs {
		if w, ok := want[kv.Key]; ok && kv.MaybeValue() != w {
			t.Errorf("%s = %q, want %q", kv.Key, kv.MaybeValue(), w)
		}
	}

	// max.message.bytes is enforced.
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("adm"), kgo.ProducerBatchMaxBytes(1<<20))
	err = cl.ProduceSync(ctx, &kgo.Record{Value: randomBytes(5000)}).FirstErr()
	if !errorsIs(err, kerr.MessageTooLarge) {
		t.Fatalf("oversized batch: %v", err)
	}

	// ListOffsets and DeleteRecords.
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("v"), Timestamp: time.UnixMilli(int64(1000 * (i + 1)))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 10 {
		t.Fatalf("end offsets sum %d, want 10", total)
	}
	var part int32 = -1
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 10 {
			part = o.Partition
		}
	})
	if part < 0 {
		t.Fatal("no partition holds all ten records")
	}
	byTs, err := adm.ListOffsetsAfterMilli(ctx, 4500, "adm")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := byTs.Lookup("adm", part); o.Offset != 4 || o.Timestamp != 5000 {
		t.Fatalf("offset for timestamp 4500: %+v, want offset 4 at 5000", o)
	}
	del, err := adm.DeleteRecords(ctx, kadm.Offsets{"adm": {part: {At: 6}}})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := del.Lookup("adm", part); d.LowWatermark != 6 || d.Err != nil {
		t.Fatalf("delete records: %+v", d)
	}
	starts, _ := adm.ListStartOffsets(ctx, "adm")
	if o, _ := starts.Lookup("adm", part); o.Offset != 6 {
		t.Fatalf("start offset after DeleteRecords: %d", o.Offset)
	}

	// OffsetForLeaderEpoch of epoch 0 ends at the high watermark.
	ofle := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ofle.ReplicaID = -1
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "adm"
	op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	op.Partition, op.LeaderEpoch, op.CurrentLeaderEpoch = part, 0, 0
	ot.Partitions = append(ot.Partitions, op)
	ofle.Topics = append(ofle.Topics, ot)
	oresp, err := ofle.RequestWith(ctx, client(t, in.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if p := oresp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.EndOffset != 10 || p.LeaderEpoch != 0 {
		t.Fatalf("OffsetForLeaderEpoch: %+v", p)
	}

	// DescribeCluster.
	dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, client(t, in.Addr()))
	if err != nil || dc.ErrorCode != 0 || len(dc.Brokers) != 1 || dc.Brokers[0].NodeID != 1 || dc.ClusterID == "" {
		t.Fatalf("describe cluster: %v %+v", err, dc)
	}

	// DeleteTopics; the topic is gone and can be created again empty.
	if _, err := adm.DeleteTopics(ctx, "adm"); err != nil {
		t.Fatal(err)
	}
	md, _ = adm.Metadata(ctx)
	if _, ok := md.Topics["adm"]; ok {
		t.Fatal("deleted topic still listed")
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "adm"); err != nil {
		t.Fatal(err)
	}
	ends, _ = adm.ListEndOffsets(ctx, "adm")
	if o, _ := ends.Lookup("adm", 0); o.Offset != 0 {
		t.Fatalf("recreated topic is not empty: end %d", o.Offset)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func errorsIs(err, target error) bool {
	for e := err; e != nil; {
		if e == target {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return strings.Contains(err.Error(), target.Error())
		}
		e = u.Unwrap()
	}
	return false
}

func TestRetentionBySize(t *testing.T) {
	in := startBroker(t, "", func(s *config.Server) { s.RetentionCheckMs = 20 })
	createTopic(t, in.Addr(), "ret", 1, map[string]*string{
		"segment.bytes": kadm.StringPtr("4096"), "retention.bytes": kadm.StringPtr("8192"),
	})
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("ret"))
	for i := 0; i < 100; i++ {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: randomBytes(500)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(client(t, in.Addr()))
	deadline := time.Now().Add(10 * time.Second)
	for {
		starts, err := adm.ListStartOffsets(ctxT(t), "ret")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := starts.Lookup("ret", 0); o.Offset > 0 {
			t.Logf("log start offset advanced to %d", o.Offset)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("retention.bytes never removed a segment")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Consuming from the start begins at the new log start.
	got := consumeAll(t, in.Addr(), "ret", 1)
	if got[0].Offset == 0 {
		t.Fatal("consumer read a record retention removed")
	}
}

func TestAutoCreateSwitch(t *testing.T) {
	in := startBroker(t, "", func(s *config.Server) { f := false; s.AutoCreateTopics = &f })
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("nope"), kgo.RecordRetries(2), kgo.RecordDeliveryTimeout(3*time.Second))
	err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x")}).FirstErr()
	if !errorsIs(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("produce to a missing topic with auto-create off: %v", err)
	}
	in2 := startBroker(t, "", func(s *config.Server) { s.DefaultPartitions = 3 })
	cl2 := client(t, in2.Addr(), kgo.DefaultProduceTopic("auto"), kgo.AllowAutoTopicCreation())
	if err := cl2.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	md, _ := kadm.NewClient(cl2).Metadata(ctxT(t), "auto")
	if n := len(md.Topics["auto"].Partitions); n != 3 {
		t.Fatalf("auto-created topic has %d partitions, want DefaultPartitions 3", n)
	}
}

// rawConn speaks frames directly, for the bad-input tests.
func rawConn(t *testing.T, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func frame(key, version int16, corr int32, body []byte, flexible bool) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if flexible {
		b = append(b, 0)
	}
	b = append(b, body...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_, err := io.ReadAll(c)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: connection still open", what)
		}
	}
}

func TestBadInputClosesConnectionOnly(t *testing.T) {
	in := startBroker(t, "", func(s *config.Server) { s.MaxRequestBytes = 2 << 20 })
	cases := map[string][]byte{
		"garbage":         []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"negative length": {0xff, 0xff, 0xff, 0xf0, 1, 2, 3},
		"too large":       binary.BigEndian.AppendUint32(nil, 3<<20),
		"unknown api":     frame(999, 0, 1, nil, false),
		"unknown version": frame(3, 99, 1, nil, false),
		"truncated body":  frame(3, 1, 1, []byte{0, 0, 0, 5, 0}, false),
		"huge array":      frame(3, 1, 1, []byte{0x7f, 0xff, 0xff, 0xff, 0, 1}, false),
		"produce topics":  frame(0, 7, 1, append([]byte{0xff, 0xff, 0, 1, 0, 0, 0, 10, 0x7f, 0xff, 0xff, 0xff}, make([]byte, 64)...), false),
	}
	for name, payload := range cases {
		c := rawConn(t, in.Addr())
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, name)
	}
	// The broker still serves everyone else.
	createTopic(t, in.Addr(), "alive", 1, nil)
	if n := in.Broker.Snapshot().BadFrames; n < int64(len(cases)-1) {
		t.Fatalf("bad frames counted: %d", n)
	}
}

func TestApiVersionsTooNew(t *testing.T) {
	in := startBroker(t, "")
	c := rawConn(t, in.Addr())
	if _, err := c.Write(frame(18, 77, 42, []byte{0, 0, 0}, true)); err != nil {
		t.Fatal(err)
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 42 {
		t.Fatalf("correlation id %d", corr)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 35 || len(resp.ApiKeys) == 0 {
		t.Fatalf("want UNSUPPORTED_VERSION with our keys, got %+v", resp)
	}
}

func TestCorruptBatchRefused(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "crc", 1, nil)
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	batch[len(batch)-1] ^= 0xff // flip a bit inside the CRC-covered part
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "crc"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cl := client(t, in.Addr())
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.CorruptMessage.Code {
		t.Fatalf("corrupt batch answered with %d", code)
	}
	rt.Topic = "missing-topic-x"
	req.Topics[0] = rt
	// Auto-create is on, so an unknown topic is created; an unknown
	// partition of a known topic is refused.
	rt.Topic = "crc"
	rt.Partitions[0].Partition = 7
	req.Topics[0] = rt
	resp, _ = req.RequestWith(ctxT(t), cl)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition answered with %d", code)
	}
}

// A large produce frame is summed as it arrives and its batches' CRCs
// come from the sums: a byte flipped deep inside one large batch still
// refuses that batch, and only it.
func TestLargeCorruptBatchRefused(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "crc-large", 3, nil)
	values := map[int32][]byte{}
	var batches [][]byte
	for p := range int32(3) {
		recs := make([]recordbatch.Record, 300)
		for i := range recs {
			recs[i].Value = randomBytes(1000)
		}
		values[p] = recs[len(recs)-1].Value
		batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if p == 1 {
			batch[len(batch)/2] ^= 0x10
		}
		batches = append(batches, batch)
	}
	for _, rp := range produceRawEach(t, client(t, in.Addr()), "crc-large", batches) {
		want := int16(0)
		if rp.Partition == 1 {
			want = kerr.CorruptMessage.Code
		}
		if rp.ErrorCode != want {
			t.Fatalf("partition %d answered %d, want %d", rp.Partition, rp.ErrorCode, want)
		}
	}
	got := consumeAll(t, in.Addr(), "crc-large", 600)
	last := map[int32][]byte{}
	for _, r := range got {
		if r.Partition == 1 {
			t.Fatalf("a record of the corrupt batch was stored at offset %d", r.Offset)
		}
		last[r.Partition] = r.Value
	}
	for _, p := range []int32{0, 2} {
		if !bytes.Equal(last[p], values[p]) {
			t.Fatalf("partition %d: last value differs from what was produced", p)
		}
	}
}

func TestPipelinedAnswersInOrder(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "pipe", 1, nil)
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("pipe"), kgo.MaxProduceRequestsInflightPerBroker(5),
		kgo.ProducerLinger(0), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks()))
	var wg sync.WaitGroup
	var mu sync.Mutex
	offsets := map[string]int64{}
	for i := 0; i < 2000; i++ {
		wg.Add(1)
		v := fmt.Sprint(i)
		cl.Produce(ctxT(t), &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			offsets[v] = r.Offset
			mu.Unlock()
		})
	}
	wg.Wait()
	got := consumeAll(t, in.Addr(), "pipe", 2000)
	for _, r := range got {
		if offsets[string(r.Value)] != r.Offset {
			t.Fatalf("record %s acknowledged at %d, read at %d", r.Value, offsets[string(r.Value)], r.Offset)
		}
	}
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

// produceRaw sends one batch built by hand, for the idempotence tests.
func produceRaw(t *testing.T, cl *kgo.Client, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	return produceRawEach(t, cl, topic, [][]byte{batch})[0]
}

// produceRawEach produces batches[i] to partition i of topic in one
// request, acks=all, and returns the partitions' answers.
func produceRawEach(t *testing.T, cl *kgo.Client, topic string, batches [][]byte) []kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for i, batch := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(i)
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions
}

func TestIdempotentProducer(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "idem", 1, nil)
	cl := client(t, in.Addr())
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionTimeoutMillis = 60000
	ir, err := init.RequestWith(ctxT(t), cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %+v", err, ir)
	}
	pid := ir.ProducerID
	batch := func(seq int32, n int) []byte {
		recs := make([]recordbatch.Record, n)
		for i := range recs {
			recs[i] = recordbatch.Record{Value: []byte(fmt.Sprint(seq + int32(i)))}
		}
		b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: pid, ProducerEpoch: ir.ProducerEpoch, BaseSequence: seq}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if r := produceRaw(t, cl, "idem", batch(0, 3)); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("first batch: %+v", r)
	}
	if r := produceRaw(t, cl, "idem", batch(3, 2)); r.ErrorCode != 0 || r.BaseOffset != 3 {
		t.Fatalf("second batch: %+v", r)
	}
	// A retry of the first batch is answered with its original offset and
	// not stored again.
	if r := produceRaw(t, cl, "idem", batch(0, 3)); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("retried batch: %+v", r)
	}
	if r := produceRaw(t, cl, "idem", batch(9, 1)); r.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap in sequence: %+v", r)
	}
	in.Close()

	// After a restart the state is back (from the snapshot), and new
	// producer ids never repeat.
	in = startBroker(t, dir)
	defer in.Close()
	cl = client(t, in.Addr())
	if r := produceRaw(t, cl, "idem", batch(3, 2)); r.ErrorCode != 0 || r.BaseOffset != 3 {
		t.Fatalf("retry after restart: %+v", r)
	}
	ir2, err := init.RequestWith(ctxT(t), cl)
	if err != nil || ir2.ErrorCode != 0 || ir2.ProducerID == pid {
		t.Fatalf("second InitProducerId: %v %+v (first was %d)", err, ir2, pid)
	}
	got := consumeAll(t, in.Addr(), "idem", 5)
	if len(got) != 5 {
		t.Fatalf("log holds %d records, want 5", len(got))
	}
	// franz-go's default (idempotent) producer works end to end.
	p := client(t, in.Addr(), kgo.DefaultProduceTopic("idem"))
	for i := 0; i < 100; i++ {
		if err := p.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCommittedOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "co", 3, nil)
	adm := kadm.NewClient(client(t, in.Addr()))
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "co", Partition: 0, At: 42, LeaderEpoch: 0, Metadata: "m0"})
	offs.Add(kadm.Offset{Topic: "co", Partition: 2, At: 7, LeaderEpoch: -1})
	resp, err := adm.CommitOffsets(ctxT(t), "g1", offs)
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	offs = kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "co", Partition: 0, At: 43, LeaderEpoch: 0})
	if _, err := adm.CommitOffsets(ctxT(t), "g1", offs); err != nil {
		t.Fatal(err)
	}
	in.Close()
	in = startBroker(t, dir)
	defer in.Close()
	adm = kadm.NewClient(client(t, in.Addr()))
	fetched, err := adm.FetchOffsets(ctxT(t), "g1")
	if err != nil || fetched.Error() != nil {
		t.Fatalf("fetch: %v %v", err, fetched.Error())
	}
	if o, _ := fetched.Lookup("co", 0); o.At != 43 {
		t.Fatalf("partition 0 committed %d, want 43 (the later commit)", o.At)
	}
	if o, _ := fetched.Lookup("co", 2); o.At != 7 {
		t.Fatalf("partition 2 committed %d, want 7", o.At)
	}
	if _, ok := fetched.Lookup("co", 1); ok {
		t.Fatal("partition 1 was never committed")
	}
	// OffsetDelete removes a partition's commit.
	dr, err := adm.DeleteOffsets(ctxT(t), "g1", kadm.TopicsSet{"co": {2: {}}})
	if err != nil || dr.Error() != nil {
		t.Fatalf("delete offsets: %v %v", err, dr.Error())
	}
	fetched, _ = adm.FetchOffsets(ctxT(t), "g1")
	if _, ok := fetched.Lookup("co", 2); ok {
		t.Fatal("deleted offset still returned")
	}
	// The internal topic is listed as internal and refuses client writes.
	md, _ := adm.Metadata(ctxT(t), "__consumer_offsets")
	if !md.Topics["__consumer_offsets"].IsInternal {
		t.Fatal("__consumer_offsets not marked internal")
	}
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("__consumer_offsets"), kgo.RecordRetries(1))
	if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x")}).FirstErr(); !errorsIs(err, kerr.InvalidTopicException) {
		t.Fatalf("client write to __consumer_offsets: %v", err)
	}
}

// TestResponseTaggedDefaults checks that fetch and produce answers leave
// the KIP-951/KIP-320 tagged fields at "none" (-1), not node 0 / epoch 0,
// which clients would follow to a broker that does not exist.
func TestResponseTaggedDefaults(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "tags", 1, nil)
	cl := client(t, in.Addr())
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
	pr := produceRaw(t, cl, "tags", batch)
	if pr.CurrentLeader.LeaderID != -1 || pr.CurrentLeader.LeaderEpoch != -1 {
		t.Fatalf("produce CurrentLeader %+v, want -1/-1", pr.CurrentLeader)
	}
	md, _ := kadm.NewClient(cl).Metadata(ctxT(t), "tags")
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "tags", md.Topics["tags"].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	fr, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := fr.Topics[0].Partitions[0]
	if p.CurrentLeader.LeaderID != -1 || p.DivergingEpoch.Epoch != -1 || p.SnapshotID.Epoch != -1 {
		t.Fatalf("fetch tagged fields %+v %+v %+v, want -1", p.CurrentLeader, p.DivergingEpoch, p.SnapshotID)
	}
}

// TestInternalTopicsAreProtected checks that clients cannot create, grow,
// reconfigure or trim the broker's internal topics, and that an invalid
// acks value is refused.
func TestInternalTopicsAreProtected(t *testing.T) {
	in := startBroker(t, "")
	cl := client(t, in.Addr())
	adm := kadm.NewClient(cl)
	ctx := ctxT(t)
	if r, _ := adm.CreateTopic(ctx, 1, 1, nil, "__transaction_state"); !errorsIs(r.Err, kerr.InvalidTopicException) {
		t.Fatalf("client-created internal topic: %v", r.Err)
	}
	// Make __producer_ids exist (an idempotent producer), then try to trim
	// and reconfigure it.
	p := client(t, in.Addr(), kgo.DefaultProduceTopic("prot"), kgo.AllowAutoTopicCreation())
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	del, err := adm.DeleteRecords(ctx, kadm.Offsets{"__producer_ids": {0: {At: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := del.Lookup("__producer_ids", 0); !errorsIs(d.Err, kerr.InvalidTopicException) {
		t.Fatalf("DeleteRecords on __producer_ids: %+v", d)
	}
	alter, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("delete")}}, "__producer_ids")
	if len(alter) != 1 || !errorsIs(alter[0].Err, kerr.InvalidTopicException) {
		t.Fatalf("AlterConfigs on __producer_ids: %+v", alter)
	}
	// franz-go rewrites a produce request's acks, so send this one raw.
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
	req := kmsg.NewPtrProduceRequest()
	req.Version = 7
	req.Acks = 2
	req.TimeoutMillis = 1000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "prot"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	c := rawConn(t, in.Addr())
	body := req.AppendTo(nil)
	if _, err := c.Write(frame(0, 7, 9, body, false)); err != nil {
		t.Fatal(err)
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 7
	if err := resp.ReadFrom(buf[4:]); err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRequiredAcks.Code {
		t.Fatalf("acks=2 answered with %d", code)
	}
}

// TestAcks0FailureClosesConnection: an acks=0 produce gets no answer, so a
// failed one closes the connection (as Kafka does) for the client to notice.
func TestAcks0FailureClosesConnection(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "a0", 1, nil)
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
	send := func(partition int32) net.Conn {
		req := kmsg.NewPtrProduceRequest()
		req.Version = 7
		req.Acks = 0
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "a0"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = partition
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		c := rawConn(t, in.Addr())
		if _, err := c.Write(frame(0, 7, 1, req.AppendTo(nil), false)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	expectClosed(t, send(5), "acks=0 to a missing partition")
	// A good acks=0 produce leaves the connection open: a later request
	// on it is answered.
	c := send(0)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	if _, err := c.Write(frame(3, 1, 2, md.AppendTo(nil), false)); err != nil {
		t.Fatal(err)
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		t.Fatalf("connection closed after a good acks=0 produce: %v", err)
	}
}
