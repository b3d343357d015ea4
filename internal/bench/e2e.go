package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// e2eMagic starts every measured value of an end-to-end case, followed by
// the send time: the consumer skips anything else (the warm-up records).
const e2eMagic = "mqe2e\x00"

// e2eHeader is the bytes of a value that carry the magic and the time.
const e2eHeader = len(e2eMagic) + 8

// endToEnd runs an end-to-end case: a consumer long-polls the topic while
// producers send at cfg.Rate records per second (pipelined, paced every
// millisecond), each value stamped with its send time, and the latency of
// every record is the time from its Produce call until the consumer holds
// it. A fixed rate well below the maximum measures what a reader waits,
// not the length of a queue. The producer side fills res.Produce as the
// pipelined mode does.
func endToEnd(ctx context.Context, cfg *Config, pool *ValuePool, cs caseSpec, topic string, res *CaseResult, stderr io.Writer) error {
	if cfg.RecordSize < e2eHeader {
		return fmt.Errorf("end-to-end mode needs --record-size of at least %d bytes", e2eHeader)
	}
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return fmt.Errorf("consumer client: %w", err)
	}
	defer cons.Close()
	prod, err := kgo.NewClient(producerOpts(cfg, cs, topic, 0)...)
	if err != nil {
		return fmt.Errorf("producer client: %w", err)
	}
	defer prod.Close()

	// Warm up both sides: the producer has metadata and connections, and
	// the consumer has read the warm-up records (so it is polling) before
	// the clock starts.
	warm := make([]*kgo.Record, cs.Partitions)
	for i := range warm {
		warm[i] = &kgo.Record{Value: []byte("warm-up")}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = prod.ProduceSync(wctx, warm...).FirstErr()
	for seen := 0; err == nil && seen < len(warm); {
		f := cons.PollFetches(wctx)
		if err = wctx.Err(); err == nil {
			seen += f.NumRecords()
		}
	}
	cancel()
	if err != nil {
		return fmt.Errorf("warm-up on %s: %w", topic, err)
	}

	var (
		e2e, ack       = new(Histogram), new(Histogram)
		acked, failed  atomic.Int64
		received       atomic.Int64
		firstMu        sync.Mutex
		first          error
		consumeDone    = make(chan struct{})
		producing      = make(chan struct{})
		lastReceivedAt atomic.Int64
	)
	go func() { // owned by this call: it returns only after consumeDone
		defer close(consumeDone)
		idleSince := time.Now()
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			f := cons.PollFetches(pctx)
			cancel()
			now := time.Now()
			n := 0
			f.EachRecord(func(r *kgo.Record) {
				if len(r.Value) < e2eHeader || string(r.Value[:len(e2eMagic)]) != e2eMagic {
					return
				}
				sent := int64(binary.BigEndian.Uint64(r.Value[len(e2eMagic):]))
				e2e.Record(now.Sub(time.Unix(0, sent)))
				n++
			})
			if n > 0 {
				received.Add(int64(n))
				lastReceivedAt.Store(now.UnixNano())
				idleSince = now
			}
			select {
			case <-producing:
			default:
				continue // still producing
			}
			if received.Load() >= acked.Load() || now.Sub(idleSince) > cfg.ConsumeTimeout {
				return
			}
		}
	}()

	prog := StartProgress(stderr, cfg.ProgressInterval, cs.label(), "produce", &acked, 0, cfg.RecordSize, cfg.Duration)
	start := time.Now()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Millisecond)
	var sent int64
	for now := start; now.Sub(start) < cfg.Duration && ctx.Err() == nil; now = <-tick.C {
		due := int64(now.Sub(start).Seconds() * float64(cfg.Rate))
		for ; sent < due; sent++ {
			v := append([]byte(nil), pool.Next()...)
			t0 := time.Now()
			copy(v, e2eMagic)
			binary.BigEndian.PutUint64(v[len(e2eMagic):], uint64(t0.UnixNano()))
			wg.Add(1)
			prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					failed.Add(1)
					firstMu.Lock()
					if first == nil {
						first = err
					}
					firstMu.Unlock()
					return
				}
				ack.Record(time.Since(t0))
				acked.Add(1)
			})
		}
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)
	prog.Stop()
	close(producing)
	<-consumeDone

	out := &res.Produce
	out.fill(acked.Load(), failed.Load(), cfg.RecordSize, elapsed, ack)
	c := &res.Consume
	c.Records = received.Load()
	c.Bytes = c.Records * int64(cfg.RecordSize)
	if last := lastReceivedAt.Load(); last > 0 {
		c.Seconds = time.Unix(0, last).Sub(start).Seconds()
	}
	c.RecordsPerSec = rate(float64(c.Records), c.Seconds)
	c.MBPerSec = rate(float64(c.Bytes)/1e6, c.Seconds)
	c.Complete = c.Records >= out.Records
	c.E2EP50Ms, c.E2EP99Ms, c.E2EP999Ms, c.E2EMaxMs = ms(e2e.Quantile(50)), ms(e2e.Quantile(99)), ms(e2e.Quantile(99.9)), ms(e2e.Max())
	fmt.Fprintf(stderr, "\r[%s] %d records at %d/s: end-to-end p50 %.3f ms p99 %.3f ms p999 %.3f ms (acks p50 %.3f ms)%s\n",
		cs.label(), c.Records, cfg.Rate, c.E2EP50Ms, c.E2EP99Ms, c.E2EP999Ms, out.P50Ms, clearTail)
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case out.Records == 0:
		return fmt.Errorf("every produce failed: %v", first)
	case !c.Complete:
		return fmt.Errorf("the consumer received %d of %d acknowledged records within the %s idle timeout", c.Records, out.Records, cfg.ConsumeTimeout)
	}
	if out.Errors > 0 {
		fmt.Fprintf(stderr, "[%s] %d produce errors, first: %v\n", cs.label(), out.Errors, first)
	}
	return nil
}
