package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"testing"

	"github.com/IBM/sarama"
	kafka "github.com/segmentio/kafka-go"
)

// goScenario is a driver's output for the Go clients, which run in
// process: the same JSON lines as the other drivers print.
type goScenario struct {
	mu    sync.Mutex
	out   io.Writer
	acked map[string]bool
	seen  map[string]bool
	errs  []string
}

func newGoScenario(out io.Writer) *goScenario {
	return &goScenario{out: out, acked: map[string]bool{}, seen: map[string]bool{}}
}

func (g *goScenario) emit(k, v string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch k {
	case "acked":
		g.acked[v] = true
	case "consumed":
		g.seen[v] = true
	}
	b, _ := json.Marshal(map[string]string{k: v})
	fmt.Fprintf(g.out, "%s\n", b)
}

func (g *goScenario) fail(format string, args ...any) {
	g.mu.Lock()
	g.errs = append(g.errs, fmt.Sprintf(format, args...))
	g.mu.Unlock()
}

// allSeen reports whether the group read every acknowledged value.
func (g *goScenario) allSeen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for v := range g.acked {
		if !g.seen[v] {
			return false
		}
	}
	return true
}

func (g *goScenario) done(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"done": true, "client": client, "errors": g.errs[:min(len(g.errs), 20)]})
	fmt.Fprintf(g.out, "%s\n", b)
}

// scenarioArgs are a driver's arguments.
func scenarioArgs(args []string) (seeds []string, topic, group string, n, rf int) {
	n, _ = strconv.Atoi(args[3])
	rf, _ = strconv.Atoi(args[4])
	return strings.Split(args[0], ","), args[1], args[2], n, rf
}

// saramaDriver: sarama's idempotent producer (one request in flight, as
// it requires) and its consumer group.
func saramaDriver() driver {
	return driver{name: "sarama", run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		seeds, topic, group, n, rf := scenarioArgs(args)
		g := newGoScenario(out)
		cfg := saramaConfig(sarama.V3_6_0_0)
		saramaIdempotent(cfg)
		cfg.Producer.Retry.Max = 30
		cfg.Producer.Retry.Backoff = 200 * time.Millisecond
		cfg.Producer.Compression = sarama.CompressionSnappy
		cfg.Metadata.Retry.Max = 30
		cfg.Admin.Timeout = 30 * time.Second
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		cfg.Consumer.Offsets.AutoCommit.Enable = false
		adm, err := sarama.NewClusterAdmin(seeds, cfg)
		if err != nil {
			return err
		}
		if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: int16(rf)}, false); err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			adm.Close()
			return err
		}
		adm.Close()
		prod, err := sarama.NewAsyncProducer(seeds, cfg)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			succ, errs := prod.Successes(), prod.Errors()
			for succ != nil || errs != nil {
				select {
				case m, ok := <-succ:
					if !ok {
						succ = nil
						continue
					}
					v, _ := m.Value.Encode()
					g.emit("acked", string(v))
				case e, ok := <-errs:
					if !ok {
						errs = nil
						continue
					}
					g.fail("send: %v", e.Err)
				}
			}
		}()
		for i := range n {
			prod.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i%7)),
				Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))}
			time.Sleep(10 * time.Millisecond)
		}
		prod.AsyncClose()
		wg.Wait()
		cg, err := sarama.NewConsumerGroup(seeds, group, cfg)
		if err != nil {
			return err
		}
		defer cg.Close()
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		go func() {
			for cctx.Err() == nil && !g.allSeen() {
				time.Sleep(200 * time.Millisecond)
			}
			cancel()
		}()
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{topic}, saramaHandler{g}); err != nil && cctx.Err() == nil {
				g.fail("consume: %v", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
		g.done("sarama")
		return nil
	}}
}

type saramaHandler struct{ g *goScenario }

func (saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim marks every message and commits the marks at most every
// 100 ms (each Commit is a synchronous round trip), and once more when
// the claim ends.
func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	last := time.Now()
	defer s.Commit()
	for m := range c.Messages() {
		h.g.emit("consumed", string(m.Value))
		s.MarkMessage(m, "")
		if time.Since(last) > 100*time.Millisecond {
			s.Commit()
			last = time.Now()
		}
	}
	return nil
}

// kafkaGoDriver: segmentio/kafka-go, which has no idempotent producer
// (acks=all with retries: a failover may store a record twice).
func kafkaGoDriver() driver {
	return driver{name: "kafka-go", atLeastOnce: true, run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		seeds, topic, group, n, rf := scenarioArgs(args)
		g := newGoScenario(out)
		var created error
		for range 30 { // the controller may have just failed over
			created = createKafkaGoTopic(ctx, seeds, topic, rf)
			if created == nil || errors.Is(created, kafka.TopicAlreadyExists) {
				created = nil
				break
			}
			time.Sleep(time.Second)
		}
		if created != nil {
			return created
		}
		// Every broker's metadata lags a CreateTopics a little (in Kafka
		// too), and kafka-go's writer gives up on a topic its metadata
		// lacks: wait until each seed lists the partitions.
		waitKafkaGoTopic(ctx, seeds, topic, 3)
		// Its own transport: kafka.DefaultTransport caches metadata for
		// 6 s, shared by every writer of the process. Synchronous
		// writes, retried as a kafka-go user retries a write that
		// failed (a topic the metadata does not show yet, a failover).
		w := &kafka.Writer{Addr: kafka.TCP(seeds...), Topic: topic, RequiredAcks: kafka.RequireAll, MaxAttempts: 30,
			WriteBackoffMin: 100 * time.Millisecond, WriteBackoffMax: time.Second, BatchTimeout: time.Millisecond,
			Compression: kafka.Lz4, Balancer: &kafka.Hash{}, Transport: &kafka.Transport{MetadataTTL: 500 * time.Millisecond}}
		for i := range n {
			msg := kafka.Message{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "kafkago-%d", i)}
			var err error
			for range 20 {
				if err = w.WriteMessages(ctx, msg); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				g.fail("write %s: %v", msg.Value, err)
			} else {
				g.emit("acked", string(msg.Value))
			}
		}
		if err := w.Close(); err != nil {
			g.fail("close writer: %v", err)
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds, GroupID: group, Topic: topic, StartOffset: kafka.FirstOffset,
			MaxWait: 200 * time.Millisecond, CommitInterval: 0})
		defer r.Close()
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		for cctx.Err() == nil && !g.allSeen() {
			fctx, fcancel := context.WithTimeout(cctx, time.Second)
			m, err := r.FetchMessage(fctx)
			fcancel()
			if err != nil {
				continue
			}
			g.emit("consumed", string(m.Value))
			if err := r.CommitMessages(cctx, m); err != nil {
				g.fail("commit: %v", err)
			}
		}
		g.done("kafka-go")
		return nil
	}}
}

// createKafkaGoTopic creates topic through the controller kafka-go finds
// from the first seed that answers.
func createKafkaGoTopic(ctx context.Context, seeds []string, topic string, rf int) error {
	var last error
	for _, s := range seeds {
		conn, err := kafka.DialContext(ctx, "tcp", s)
		if err != nil {
			last = err
			continue
		}
		ctl, err := conn.Controller()
		conn.Close()
		if err != nil {
			last = err
			continue
		}
		cc, err := kafka.DialContext(ctx, "tcp", net.JoinHostPort(ctl.Host, strconv.Itoa(ctl.Port)))
		if err != nil {
			last = err
			continue
		}
		err = cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 3, ReplicationFactor: rf})
		cc.Close()
		return err
	}
	return last
}

// waitKafkaGoTopic waits (up to 30 s) until every seed's metadata lists
// topic with n partitions.
func waitKafkaGoTopic(ctx context.Context, seeds []string, topic string, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range seeds {
		for time.Now().Before(deadline) {
			conn, err := kafka.DialContext(ctx, "tcp", s)
			if err == nil {
				ps, err := conn.ReadPartitions(topic)
				conn.Close()
				if err == nil && len(ps) == n {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
