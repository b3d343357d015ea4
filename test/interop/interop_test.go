// Package interop runs third-party Kafka clients (IBM/sarama,
// segmentio/kafka-go, and librdkafka through confluent_kafka for Python and
// through kcat) against an in-process MoonMQ broker.
//
// This file covers produce, fetch and admin with partitions assigned
// directly and non-idempotent producers; the *_groups_test.go files cover
// consumer groups and offset commits, the idempotent producer and
// transactions.
package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
)

// startBroker runs a broker on loopback with a fresh data directory and
// closes it when the test ends.
func startBroker(t *testing.T) *app.Instance {
	t.Helper()
	cfg := config.Default()
	cfg.Port = 0
	cfg.MetricsPort = 0
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tl := newTestLog(t, "")
	in, err := app.Start(cfg, slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return in
}

// testLog forwards client and broker logs to t.Log, and drops them once the
// test is over, since client goroutines may outlive it by a little.
type testLog struct {
	mu     sync.Mutex
	t      testing.TB
	prefix string
	done   bool
}

func newTestLog(t testing.TB, prefix string) *testLog {
	l := &testLog{t: t, prefix: prefix}
	t.Cleanup(func() { // registered first, so it runs after every other cleanup
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(l.prefix + strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) Printf(format string, args ...any) {
	_, _ = l.Write([]byte(fmt.Sprintf(format, args...)))
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sent is what a producer was told about one record, and what it sent.
type sent struct {
	key, value []byte // nil means null
	headers    [][2]string
	ts         time.Time
}

// expectLog collects acknowledged records by partition and offset.
type expectLog struct {
	mu    sync.Mutex
	parts map[int32]map[int64]sent
}

func newExpectLog() *expectLog { return &expectLog{parts: map[int32]map[int64]sent{}} }

func (e *expectLog) add(t *testing.T, p int32, off int64, s sent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.parts[p] == nil {
		e.parts[p] = map[int64]sent{}
	}
	if _, dup := e.parts[p][off]; dup {
		t.Errorf("partition %d offset %d was acknowledged twice", p, off)
	}
	e.parts[p][off] = s
}

// checkDense fails unless each partition's acknowledged offsets are exactly
// 0..n-1, and returns n per partition.
func (e *expectLog) checkDense(t *testing.T, partitions int32) map[int32]int64 {
	t.Helper()
	ends := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		offs := e.parts[p]
		if len(offs) == 0 {
			t.Errorf("partition %d got no records; the test wants every partition used", p)
		}
		for o := int64(0); o < int64(len(offs)); o++ {
			if _, ok := offs[o]; !ok {
				t.Errorf("partition %d: acknowledged offsets are not dense 0..%d (missing %d)", p, len(offs)-1, o)
				break
			}
		}
		ends[p] = int64(len(offs))
	}
	for p := range e.parts {
		if p < 0 || p >= partitions {
			t.Errorf("records acknowledged on partition %d of a %d-partition topic", p, partitions)
		}
	}
	return ends
}

func nullable(b []byte) string {
	if b == nil {
		return "<null>"
	}
	if len(b) > 40 {
		return fmt.Sprintf("%q...(%d bytes)", b[:40], len(b))
	}
	return strconv.Quote(string(b))
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func sameHeaders(a, b [][2]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compare reports how a consumed record differs from the sent one.
func (s sent) compare(key, value []byte, headers [][2]string, ts time.Time) string {
	var diffs []string
	if !sameBytes(key, s.key) {
		diffs = append(diffs, fmt.Sprintf("key %s, want %s", nullable(key), nullable(s.key)))
	}
	if !sameBytes(value, s.value) {
		diffs = append(diffs, fmt.Sprintf("value %s, want %s", nullable(value), nullable(s.value)))
	}
	if !sameHeaders(headers, s.headers) {
		diffs = append(diffs, fmt.Sprintf("headers %q, want %q", headers, s.headers))
	}
	if !s.ts.IsZero() && !ts.Equal(s.ts) {
		diffs = append(diffs, fmt.Sprintf("timestamp %v, want %v", ts.UnixMilli(), s.ts.UnixMilli()))
	}
	return strings.Join(diffs, "; ")
}

// record builds the i-th record a client sends for codec. Some records have
// a null key, a null value, no headers or a large compressible value, so
// every shape the record format allows goes through the broker.
func record(client, codec string, i int, base time.Time) sent {
	s := sent{
		key:     []byte(fmt.Sprintf("%s-%s-%d", client, codec, i)),
		value:   []byte(strings.Repeat(fmt.Sprintf("%s:%d;", codec, i), 1+i%40)),
		headers: [][2]string{{"codec", codec}, {"i", strconv.Itoa(i)}},
		ts:      base.Add(time.Duration(i) * time.Millisecond),
	}
	switch {
	case i%17 == 5:
		s.key = nil
	case i%23 == 7:
		s.value = nil
	case i%10 == 3:
		s.headers = nil
	case i == 1:
		s.value = bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	case i == 2:
		s.value = []byte{}
		s.headers = [][2]string{{"empty", ""}}
	}
	return s
}

// ---------------------------------------------------------------- sarama

var saramaCodecs = []sarama.CompressionCodec{
	sarama.CompressionNone, sarama.CompressionGZIP, sarama.CompressionSnappy,
	sarama.CompressionLZ4, sarama.CompressionZSTD,
}

// saramaLog receives sarama's global log. sarama.Logger is set once, before
// any client runs, because sarama goroutines that outlive a test still read
// it; what changes per test is where the lines go.
var saramaLog = &switchLog{}

func init() { sarama.Logger = log.New(saramaLog, "", log.Lmicroseconds) }

type switchLog struct {
	mu sync.Mutex
	to *testLog
}

func (s *switchLog) set(to *testLog) {
	s.mu.Lock()
	s.to = to
	s.mu.Unlock()
}

func (s *switchLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	to := s.to
	s.mu.Unlock()
	if to != nil {
		return to.Write(p)
	}
	return len(p), nil
}

func saramaConfig(v sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "moonmq-interop"
	cfg.Version = v
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Admin.Timeout = 5 * time.Second
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Idempotent = false
	// Retries stay on: sarama's Broker.Open marks a broker open before it
	// takes the connection lock, so a concurrent first request can fail
	// with "broker not connected" without ever reaching the wire. A retry
	// that duplicated a record would still be caught: every partition's
	// high watermark must equal what the producer was acknowledged.
	cfg.Producer.Retry.Max = 3
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Fetch.Default = 32 << 10 // several fetches per partition
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	return cfg
}

// saramaIdempotent makes a producer that writes each record once. sarama
// can lose a response on its own (a metadata refresh at start re-registers
// the broker and closes the connection a batch was just written on) and
// retries the batch; without a producer id that retry is a second copy,
// as it would be on Kafka. Tests that count records exactly need this.
func saramaIdempotent(cfg *sarama.Config) {
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
}

func TestSarama(t *testing.T) {
	in := startBroker(t)
	saramaLog.set(newTestLog(t, "sarama: "))
	t.Cleanup(func() { saramaLog.set(nil) })
	for _, v := range []sarama.KafkaVersion{sarama.V2_1_0_0, sarama.V3_6_0_0} {
		t.Run(v.String(), func(t *testing.T) { testSarama(t, in.Addr(), v) })
	}
}

func testSarama(t *testing.T, addr string, v sarama.KafkaVersion) {
	addrs := []string{addr}
	topic := "sarama-" + v.String()
	const partitions = 4
	cfg := saramaConfig(v)

	adm, err := sarama.NewClusterAdmin(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	retention := "3600000"
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{
		NumPartitions: partitions - 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention},
	}, false); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Fatalf("CreateTopic of an existing topic: %v, want %v", err, sarama.ErrTopicAlreadyExists)
	}
	if err := adm.CreatePartitions(topic, partitions, nil, false); err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := topics[topic]; !ok || d.NumPartitions != partitions {
		t.Fatalf("ListTopics: %s is %+v (listed: %v), want %d partitions", topic, d, ok, partitions)
	}

	// Produce with every codec into the one topic, so partitions hold
	// batches of mixed codecs.
	want := newExpectLog()
	base := time.UnixMilli(time.Now().UnixMilli())
	const n = 60
	for ci, codec := range saramaCodecs {
		pcfg := saramaConfig(v)
		pcfg.Producer.Compression = codec
		saramaIdempotent(pcfg)
		prod, err := sarama.NewSyncProducer(addrs, pcfg)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*sarama.ProducerMessage
		var recs []sent
		for i := 0; i < n; i++ {
			r := record("sarama", codec.String(), i, base.Add(time.Duration(ci)*time.Second))
			m := &sarama.ProducerMessage{Topic: topic, Timestamp: r.ts}
			if r.key != nil {
				m.Key = sarama.ByteEncoder(r.key)
			}
			if r.value != nil {
				m.Value = sarama.ByteEncoder(r.value)
			}
			for _, h := range r.headers {
				m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
			}
			msgs = append(msgs, m)
			recs = append(recs, r)
		}
		if err := prod.SendMessages(msgs[:n/2]); err != nil {
			var pes sarama.ProducerErrors
			if errors.As(err, &pes) {
				for _, pe := range pes {
					t.Errorf("%s: partition %d: %v", codec, pe.Msg.Partition, pe.Err)
				}
			}
			t.Fatalf("%s: SendMessages: %v", codec, err)
		}
		for _, m := range msgs[n/2:] { // and one at a time
			if _, _, err := prod.SendMessage(m); err != nil {
				t.Fatalf("%s: SendMessage: %v", codec, err)
			}
		}
		if err := prod.Close(); err != nil {
			t.Fatal(err)
		}
		for i, m := range msgs {
			want.add(t, m.Partition, m.Offset, recs[i])
		}
	}
	ends := want.checkDense(t, partitions)
	if t.Failed() {
		t.FailNow()
	}

	// Read everything back, partition by partition, from the oldest offset.
	cl, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for p := int32(0); p < partitions; p++ {
		if hw, err := cl.GetOffset(topic, p, sarama.OffsetNewest); err != nil || hw != ends[p] {
			t.Fatalf("partition %d: newest offset %d (%v), want %d", p, hw, err, ends[p])
		}
		if lo, err := cl.GetOffset(topic, p, sarama.OffsetOldest); err != nil || lo != 0 {
			t.Fatalf("partition %d: oldest offset %d (%v), want 0", p, lo, err)
		}
		// ListOffsets by timestamp: the first record stamped at or after the
		// start of the third codec's run.
		target := base.Add(2 * time.Second)
		wantOff := ends[p]
		for o := ends[p] - 1; o >= 0; o-- {
			if !want.parts[p][o].ts.Before(target) {
				wantOff = o
			}
		}
		if off, err := cl.GetOffset(topic, p, target.UnixMilli()); err != nil || off != wantOff {
			t.Errorf("partition %d: offset for time %d is %d (%v), want %d", p, target.UnixMilli(), off, err, wantOff)
		}
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for next := int64(0); next < ends[p]; next++ {
			select {
			case m := <-pc.Messages():
				if m.Offset != next {
					t.Fatalf("partition %d: got offset %d, want %d", p, m.Offset, next)
				}
				var hs [][2]string
				for _, h := range m.Headers {
					hs = append(hs, [2]string{string(h.Key), string(h.Value)})
				}
				if d := want.parts[p][next].compare(m.Key, m.Value, hs, m.Timestamp); d != "" {
					t.Errorf("partition %d offset %d: %s", p, next, d)
				}
			case err := <-pc.Errors():
				t.Fatalf("partition %d: consume: %v", p, err)
			case <-timeout:
				t.Fatalf("partition %d: consumed %d of %d records", p, next, ends[p])
			}
		}
		if hw := pc.HighWaterMarkOffset(); hw != ends[p] {
			t.Errorf("partition %d: consumer high watermark %d, want %d", p, hw, ends[p])
		}
		if err := pc.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// DeleteRecords moves the log start offset.
	if err := adm.DeleteRecords(topic, map[int32]int64{0: 2}); err != nil {
		t.Fatalf("DeleteRecords: %v", err)
	}
	if lo, err := cl.GetOffset(topic, 0, sarama.OffsetOldest); err != nil || lo != 2 {
		t.Fatalf("after DeleteRecords: oldest offset %d (%v), want 2", lo, err)
	}

	// Topic configs: describe, replace, incrementally alter, reject unknown keys.
	res := sarama.ConfigResource{Type: sarama.TopicResource, Name: topic}
	describe := func() map[string]sarama.ConfigEntry {
		t.Helper()
		entries, err := adm.DescribeConfig(res)
		if err != nil {
			t.Fatalf("DescribeConfig: %v", err)
		}
		m := map[string]sarama.ConfigEntry{}
		for _, e := range entries {
			m[e.Name] = e
		}
		return m
	}
	cfgs := describe()
	if e := cfgs["retention.ms"]; e.Value != retention || e.Default {
		t.Errorf("retention.ms: %+v, want %s set on the topic", e, retention)
	}
	if e, ok := cfgs["cleanup.policy"]; !ok || e.Value != "delete" || !e.Default {
		t.Errorf("cleanup.policy: %+v (present %v), want default delete", e, ok)
	}
	newRetention := "7200000"
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"retention.ms": &newRetention}, false); err != nil {
		t.Fatalf("AlterConfig: %v", err)
	}
	if e := describe()["retention.ms"]; e.Value != newRetention {
		t.Errorf("after AlterConfig retention.ms is %q, want %s", e.Value, newRetention)
	}
	// sarama itself refuses IncrementalAlterConfigs below Kafka 2.3.
	if v.IsAtLeast(sarama.V2_3_0_0) {
		maxMsg := "2097152"
		if err := adm.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
			"max.message.bytes": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &maxMsg},
		}, false); err != nil {
			t.Fatalf("IncrementalAlterConfig: %v", err)
		}
		cfgs = describe()
		if e := cfgs["max.message.bytes"]; e.Value != maxMsg {
			t.Errorf("after IncrementalAlterConfig max.message.bytes is %q, want %s", e.Value, maxMsg)
		}
		if e := cfgs["retention.ms"]; e.Value != newRetention {
			t.Errorf("IncrementalAlterConfig changed retention.ms to %q", e.Value)
		}
	}
	bogus := "1"
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"no.such.config": &bogus}, false); err == nil {
		t.Errorf("AlterConfig accepted an unknown config key")
	}

	if err := adm.DeleteTopic(topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if topics, err := adm.ListTopics(); err != nil {
		t.Fatal(err)
	} else if _, ok := topics[topic]; ok {
		t.Errorf("ListTopics still lists %s after DeleteTopic", topic)
	}
	if err := adm.DeleteTopic(topic); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Errorf("DeleteTopic of a deleted topic: %v, want %v", err, sarama.ErrUnknownTopicOrPartition)
	}
}

// ---------------------------------------------------------------- kafka-go

var kafkaGoCodecs = []struct {
	name  string
	codec kafka.Compression
}{
	{"none", 0}, {"gzip", kafka.Gzip}, {"snappy", kafka.Snappy}, {"lz4", kafka.Lz4}, {"zstd", kafka.Zstd},
}

func kgoHeaders(hs []kafka.Header) [][2]string {
	var out [][2]string
	for _, h := range hs {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

// readByKafkaGo is what kafka-go can return for s: its record reader turns a
// zero-length key or value into nil, so empty and null look alike there.
// (sarama and librdkafka tell them apart and check that the broker keeps
// the difference.)
func (s sent) readByKafkaGo() sent {
	if len(s.key) == 0 {
		s.key = nil
	}
	if len(s.value) == 0 {
		s.value = nil
	}
	return s
}

func kafkaGoMessage(r sent) kafka.Message {
	m := kafka.Message{Key: r.key, Value: r.value, Time: r.ts}
	for _, h := range r.headers {
		m.Headers = append(m.Headers, kafka.Header{Key: h[0], Value: []byte(h[1])})
	}
	return m
}

func TestKafkaGo(t *testing.T) {
	in := startBroker(t)
	addr := in.Addr()
	ctx := ctxTimeout(t, 30*time.Second)
	tl := newTestLog(t, "kafka-go: ")
	const topic, dialTopic = "kafkago", "kafkago-conn"
	const partitions = 3

	// Admin through a plain Conn: CreateTopics goes to the controller.
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctrl, err := conn.Controller()
	if err != nil {
		t.Fatalf("Controller: %v", err)
	}
	cc, err := kafka.DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", ctrl.Host, ctrl.Port))
	if err != nil {
		t.Fatalf("dial controller %+v: %v", ctrl, err)
	}
	defer cc.Close()
	if err := cc.CreateTopics(
		kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "3600000"}}},
		kafka.TopicConfig{Topic: dialTopic, NumPartitions: 1, ReplicationFactor: 1},
	); err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if err := cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}); err != nil {
		t.Fatalf("CreateTopics of an existing topic (kafka-go treats that as success): %v", err)
	}
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("ReadPartitions: %v", err)
	}
	if len(parts) != partitions {
		t.Fatalf("ReadPartitions: %d partitions, want %d: %+v", len(parts), partitions, parts)
	}
	for _, p := range parts {
		if p.Topic != topic || p.Leader.Host == "" || p.Leader.ID != ctrl.ID || len(p.Replicas) != 1 || len(p.Isr) != 1 {
			t.Errorf("ReadPartitions: odd partition %+v", p)
		}
	}

	t.Run("WriterReader", func(t *testing.T) {
		want := newExpectLog()
		base := time.UnixMilli(time.Now().UnixMilli())
		const n = 60
		for ci, c := range kafkaGoCodecs {
			var sentBy = map[string]sent{}
			var msgs []kafka.Message
			for i := 0; i < n; i++ {
				r := record("kafkago", c.name, i, base.Add(time.Duration(ci)*time.Second))
				if r.key == nil { // the Hash balancer needs keys to spread; keep them all
					r.key = []byte(fmt.Sprintf("k%d", i))
				}
				sentBy[string(r.key)] = r
				msgs = append(msgs, kafkaGoMessage(r))
			}
			var mu sync.Mutex
			var completionErr error
			w := &kafka.Writer{
				Addr:         kafka.TCP(addr),
				Topic:        topic,
				Balancer:     &kafka.Hash{},
				RequiredAcks: kafka.RequireAll,
				Compression:  c.codec,
				BatchTimeout: 5 * time.Millisecond,
				BatchSize:    n,
				MaxAttempts:  1,
				Logger:       tl,
				ErrorLogger:  tl,
				Completion: func(ms []kafka.Message, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						completionErr = err
						return
					}
					for _, m := range ms {
						want.add(t, int32(m.Partition), m.Offset, sentBy[string(m.Key)])
					}
				},
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatalf("%s: WriteMessages: %v", c.name, err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if completionErr != nil {
				t.Fatalf("%s: completion: %v", c.name, completionErr)
			}
		}
		ends := want.checkDense(t, partitions)
		if t.Failed() {
			t.FailNow()
		}
		for p := 0; p < partitions; p++ {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:     []string{addr},
				Topic:       topic,
				Partition:   p,
				MinBytes:    1,
				MaxBytes:    64 << 10,
				MaxWait:     200 * time.Millisecond,
				Logger:      tl,
				ErrorLogger: tl,
			})
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			for next := int64(0); next < ends[int32(p)]; next++ {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					t.Fatalf("partition %d: read %d of %d: %v", p, next, ends[int32(p)], err)
				}
				if m.Offset != next || m.Partition != p || m.Topic != topic {
					t.Fatalf("partition %d: got %s/%d@%d, want offset %d", p, m.Topic, m.Partition, m.Offset, next)
				}
				if d := want.parts[int32(p)][next].readByKafkaGo().compare(m.Key, m.Value, kgoHeaders(m.Headers), m.Time); d != "" {
					t.Errorf("partition %d offset %d: %s", p, next, d)
				}
			}
			if lag, err := r.ReadLag(rctx); err != nil || lag != 0 {
				t.Errorf("partition %d: lag %d (%v) after reading everything", p, lag, err)
			}
			cancel()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("DialLeader", func(t *testing.T) {
		lc, err := kafka.DialLeader(ctx, "tcp", addr, dialTopic, 0)
		if err != nil {
			t.Fatalf("DialLeader: %v", err)
		}
		defer lc.Close()
		if err := lc.SetDeadline(time.Now().Add(15 * time.Second)); err != nil {
			t.Fatal(err)
		}
		base := time.UnixMilli(time.Now().UnixMilli())
		var all []sent
		for ci, c := range kafkaGoCodecs {
			var msgs []kafka.Message
			for i := 0; i < 20; i++ {
				r := record("conn", c.name, i, base.Add(time.Duration(ci)*time.Second))
				all = append(all, r)
				msgs = append(msgs, kafkaGoMessage(r))
			}
			var codec kafka.CompressionCodec
			if c.codec != 0 {
				codec = c.codec.Codec()
			}
			_, part, off, _, err := lc.WriteCompressedMessagesAt(codec, msgs...)
			if err != nil {
				t.Fatalf("%s: WriteCompressedMessagesAt: %v", c.name, err)
			}
			if wantOff := int64(ci * len(msgs)); part != 0 || off != wantOff {
				t.Fatalf("%s: written at partition %d offset %d, want 0/%d", c.name, part, off, wantOff)
			}
		}
		first, last, err := lc.ReadOffsets()
		if err != nil || first != 0 || last != int64(len(all)) {
			t.Fatalf("ReadOffsets: %d..%d (%v), want 0..%d", first, last, err, len(all))
		}
		if _, err := lc.Seek(0, kafka.SeekAbsolute); err != nil {
			t.Fatal(err)
		}
		var got int
		for got < len(all) {
			b := lc.ReadBatch(1, 16<<10) // small, so the read spans batches
			for {
				m, err := b.ReadMessage()
				if err != nil {
					break
				}
				if m.Offset != int64(got) {
					t.Fatalf("ReadBatch: offset %d, want %d", m.Offset, got)
				}
				if d := all[got].readByKafkaGo().compare(m.Key, m.Value, kgoHeaders(m.Headers), m.Time); d != "" {
					t.Errorf("offset %d: %s", got, d)
				}
				got++
			}
			if err := b.Close(); err != nil {
				t.Fatalf("ReadBatch after %d of %d records: %v", got, len(all), err)
			}
		}
		if err := cc.DeleteTopics(dialTopic); err != nil {
			t.Fatalf("DeleteTopics: %v", err)
		}
		adm := kadm.NewClient(franz(t, addr))
		if td, err := adm.ListTopics(ctx); err != nil {
			t.Fatal(err)
		} else if td.Has(dialTopic) {
			t.Errorf("%s is still listed after DeleteTopics", dialTopic)
		}
	})
}

func franz(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ---------------------------------------------------------------- librdkafka

// rdkafkaValue must match value_for in testdata/rdkafka_roundtrip.py.
func rdkafkaValue(codec string, i int) string {
	return strings.Repeat(fmt.Sprintf("%s:%d;", codec, i), 1+i%50)
}

type rdkRecord struct {
	Key       string      `json:"key"`
	Value     string      `json:"value"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Headers   [][2]string `json:"headers"`
}

type rdkSummary struct {
	Client     string      `json:"client"`
	Librdkafka string      `json:"librdkafka"`
	Produced   []rdkRecord `json:"produced"`
	Consumed   []rdkRecord `json:"consumed"`
	Errors     []string    `json:"errors"`
}

func python(t *testing.T) string {
	py := "/usr/bin/python3" // where Debian's python3-confluent-kafka lives
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			py = ""
		}
	}
	var why string
	if py == "" {
		why = "no python3"
	} else if out, err := exec.Command(py, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		why = fmt.Sprintf("%s cannot import confluent_kafka: %v: %s", py, err, bytes.TrimSpace(out))
	}
	if why != "" {
		if os.Getenv("MOONMQ_REQUIRE_LIBRDKAFKA") == "1" {
			t.Fatalf("MOONMQ_REQUIRE_LIBRDKAFKA=1 but %s (apt-get install python3-confluent-kafka)", why)
		}
		t.Skipf("%s; install python3-confluent-kafka to run this test", why)
	}
	return py
}

func TestLibrdkafka(t *testing.T) {
	py := python(t)
	in := startBroker(t)
	const topic, partitions, perCodec = "rdkafka", 3, 200
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}

	ctx := ctxTimeout(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, py, "testdata/rdkafka_roundtrip.py", in.Addr(), topic,
		strconv.Itoa(partitions), strconv.Itoa(perCodec))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("python stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("rdkafka_roundtrip.py: %v\n%s", err, stdout.String())
	}
	var sum rdkSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("bad summary %q: %v", stdout.String(), err)
	}
	t.Logf("confluent_kafka %s, librdkafka %s: %d produced, %d consumed", sum.Client, sum.Librdkafka, len(sum.Produced), len(sum.Consumed))
	for _, e := range sum.Errors {
		t.Errorf("librdkafka reported: %s", e)
	}

	// What each key should hold, and where the producer was told it went.
	type wantRec struct {
		value     string
		partition int32
		headers   [][2]string
	}
	wantByKey := map[string]wantRec{}
	for _, c := range codecs {
		for i := 0; i < perCodec; i++ {
			wantByKey[fmt.Sprintf("%s-%d", c, i)] = wantRec{
				value: rdkafkaValue(c, i), partition: int32(i % partitions),
				headers: [][2]string{{"codec", c}, {"i", strconv.Itoa(i)}},
			}
		}
	}
	if len(sum.Produced) != len(wantByKey) {
		t.Fatalf("%d records acknowledged, want %d", len(sum.Produced), len(wantByKey))
	}
	acked := newExpectLog()
	for _, r := range sum.Produced {
		w, ok := wantByKey[r.Key]
		if !ok || r.Partition != w.partition {
			t.Fatalf("acknowledged %q on partition %d, want %d", r.Key, r.Partition, w.partition)
		}
		acked.add(t, r.Partition, r.Offset, sent{key: []byte(r.Key), value: []byte(w.value), headers: w.headers})
	}
	ends := acked.checkDense(t, partitions)
	if t.Failed() {
		t.FailNow()
	}

	check := func(who string, got []rdkRecord) {
		t.Helper()
		seen := map[int32]int64{}
		sort.SliceStable(got, func(i, j int) bool { return got[i].Partition < got[j].Partition })
		for _, r := range got {
			if r.Offset != seen[r.Partition] {
				t.Fatalf("%s: partition %d: offset %d, want %d", who, r.Partition, r.Offset, seen[r.Partition])
			}
			seen[r.Partition]++
			if d := acked.parts[r.Partition][r.Offset].compare([]byte(r.Key), []byte(r.Value), r.Headers, time.Time{}); d != "" {
				t.Errorf("%s: partition %d offset %d: %s", who, r.Partition, r.Offset, d)
			}
		}
		for p, end := range ends {
			if seen[p] != end {
				t.Errorf("%s: partition %d: consumed %d records, want %d", who, p, seen[p], end)
			}
		}
	}
	check("librdkafka consumer", sum.Consumed)

	// And what librdkafka wrote reads back the same through franz-go.
	cl := franz(t, in.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var viaFranz []rdkRecord
	fctx := ctxTimeout(t, 10*time.Second)
	for len(viaFranz) < len(sum.Produced) {
		fs := cl.PollFetches(fctx)
		if err := fctx.Err(); err != nil {
			t.Fatalf("franz-go consumed %d of %d records: %v", len(viaFranz), len(sum.Produced), err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("franz-go fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			rec := rdkRecord{Key: string(r.Key), Value: string(r.Value), Partition: r.Partition, Offset: r.Offset}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, [2]string{h.Key, string(h.Value)})
			}
			viaFranz = append(viaFranz, rec)
		})
	}
	check("franz-go consumer", viaFranz)
}
