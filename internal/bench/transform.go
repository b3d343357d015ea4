package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// transformCase runs a consume-transform-produce case. It fills the case's
// topic (one pipelined acks=-1 producer, for cfg.Duration or cfg.Records),
// then cfg.Producers franz-go GroupTransactSessions in one consumer group
// read it read_committed and, for every poll, copy its records to the
// same partition of an output topic inside a transaction that also
// commits the group's offsets: Kafka's exactly-once loop, as a Kafka
// Streams task or a StoatFlow processor runs it. The sessions first join
// the group and nobody polls until the coordinator describes it as stable
// with every partition assigned, so that the group's first rebalances
// (Kafka delays a new group's first one by 3 s) fall outside the clock;
// what a session's client fetched meanwhile is in its first poll. The
// clock runs from then until the input is all copied, or cfg.Duration
// passes, and the broker processes are metered over that time only.
// Latency is per record, from the poll that returned it to the commit of
// its transaction. Afterwards a read_committed consumer must find exactly
// the committed records in the output topic: a duplicate or a lost one
// fails the case.
func transformCase(ctx context.Context, cfg *Config, adm *kadm.Client, pool *ValuePool, cs caseSpec, in string, res *CaseResult, stderr io.Writer) error {
	fcfg := *cfg
	fcfg.Producers = 1
	fill := caseSpec{Acks: -1, Partitions: cs.Partitions, Mode: ModePipelined}
	fmt.Fprintf(stderr, "[%s] filling the input, %s\n", cs.label(), in)
	have, err := produce(ctx, &fcfg, pool, fill, in, new(ProduceResult), stderr)
	if err != nil {
		return fmt.Errorf("filling the input: %w", err)
	}

	out := in + "-out"
	if !cfg.NoCreate {
		if err := CreateTopic(ctx, adm, out, cs.Partitions); err != nil {
			return fmt.Errorf("creating topic %s: %w", out, err)
		}
		if !cfg.KeepTopics {
			defer deleteTopic(ctx, adm, res.Case, out, stderr)
		}
	}

	n := max(cfg.Producers, 1)
	sessions := make([]*kgo.GroupTransactSession, n)
	for i := range sessions {
		s, err := kgo.NewGroupTransactSession(transformOpts(cfg, cs, in, out, i)...)
		if err != nil {
			return fmt.Errorf("transform session: %w", err)
		}
		defer s.Close()
		sessions[i] = s
	}
	if err := waitForGroup(ctx, adm, in+"-group", in, n, cs.Partitions); err != nil {
		return err
	}

	var (
		hist        = new(Histogram)
		copied      atomic.Int64
		failed      atomic.Int64
		aborted     atomic.Int64
		lastCommit  atomic.Int64 // unix nanoseconds
		firstMu     sync.Mutex
		firstFailed error
	)
	onFail := func(err error) {
		failed.Add(1)
		firstMu.Lock()
		if firstFailed == nil {
			firstFailed = err
		}
		firstMu.Unlock()
	}
	meter, err := startUsage(cfg.BrokerPIDs)
	if err != nil {
		return fmt.Errorf("measuring the broker processes: %w", err)
	}
	prog := StartProgress(stderr, cfg.ProgressInterval, cs.label(), "transform", &copied, have, cfg.RecordSize, cfg.Duration)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	lastCommit.Store(start.UnixNano())
	finished := func() bool {
		return copied.Load() >= have || time.Now().After(deadline) ||
			time.Since(time.Unix(0, lastCommit.Load())) > cfg.ConsumeTimeout
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && !finished() {
				pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
				fetches := s.PollFetches(pctx)
				cancel()
				polled := time.Now()
				if fetches.NumRecords() == 0 {
					continue
				}
				if err := s.Begin(); err != nil {
					errs[i] = fmt.Errorf("begin transaction: %w", err)
					return
				}
				var recs int64
				fetches.EachRecord(func(r *kgo.Record) {
					recs++
					s.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Value: r.Value}, func(_ *kgo.Record, err error) {
						if err != nil {
							onFail(err)
						}
					})
				})
				committed, err := s.End(ctx, kgo.TryCommit)
				if err != nil {
					errs[i] = fmt.Errorf("end transaction: %w", err)
					return
				}
				if !committed {
					// A rebalance or a failed produce aborted it; the
					// records come back to whoever owns them now.
					aborted.Add(1)
					continue
				}
				took := time.Since(polled)
				for range recs {
					hist.Record(took)
				}
				copied.Add(recs)
				lastCommit.Store(time.Now().UnixNano())
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.Stop()
	if meter != nil {
		u, err := meter.stop(copied.Load())
		if err != nil {
			return fmt.Errorf("measuring the broker processes: %w", err)
		}
		res.Broker = &u
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	p := &res.Produce
	p.fill(copied.Load(), failed.Load(), cfg.RecordSize, elapsed, hist)
	fmt.Fprintf(stderr, "\r[%s] copied %d of %d records in %.2fs: %s rec/s %.1f MB/s, poll to commit p50 %.3f ms p99 %.3f ms, %d transactions aborted%s\n",
		cs.label(), p.Records, have, p.Seconds, humanRate(p.RecordsPerSec), p.MBPerSec, p.P50Ms, p.P99Ms, aborted.Load(), clearTail)
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Records == 0 {
		return fmt.Errorf("no transaction committed (%d produce errors, first: %v)", p.Errors, firstFailed)
	}
	return verifyCommitted(ctx, cfg, cs, out, p.Records, &res.Consume, stderr)
}

// transformOpts returns the options of the i-th session of a
// consume-transform-produce case: a read_committed consumer of in in the
// case's group, and a transactional producer to out.
func transformOpts(cfg *Config, cs caseSpec, in, out string, i int) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(in + "-group"),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.TransactionalID(fmt.Sprintf("moonmq-bench-%s-%d", out, i)),
		kgo.TransactionTimeout(60 * time.Second),
		kgo.DefaultProduceTopic(out),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(cfg.MaxBuffered),
		kgo.RecordDeliveryTimeout(setupTimeout(cs.Partitions)),
	}
}

// waitForGroup waits until the coordinator describes group as stable with
// members members whose assignments cover every one of topic's partitions,
// each member holding some when there are enough to go round, for a
// quarter of a second. (A session's own callbacks cannot count this: the
// session passes on only the first revocation before a transaction ends.)
func waitForGroup(ctx context.Context, adm *kadm.Client, group, topic string, members, partitions int) error {
	wctx, cancel := context.WithTimeout(ctx, setupTimeout(partitions))
	defer cancel()
	settled := func() bool {
		gs, err := adm.DescribeGroups(wctx, group)
		if err != nil {
			return false
		}
		g, ok := gs[group]
		if !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != members {
			return false
		}
		total := 0
		for _, m := range g.Members {
			held := 0
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					if t.Topic == topic {
						held += len(t.Partitions)
					}
				}
			}
			if held == 0 && members <= partitions {
				return false
			}
			total += held
		}
		return total == partitions
	}
	var since time.Time
	for {
		switch {
		case !settled():
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 250*time.Millisecond:
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the transform sessions' group %s did not settle on every partition: %w", group, wctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// verifyCommitted reads topic from the start read_committed and checks
// that it holds exactly want records, filling out with the read.
func verifyCommitted(ctx context.Context, cfg *Config, cs caseSpec, topic string, want int64, out *ConsumeResult, stderr io.Writer) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("verifying consumer: %w", err)
	}
	defer cl.Close()
	start := time.Now()
	last := start
	var got, bytes int64
	// Past want, one more quiet interval shows whether anything extra
	// (a duplicate) is there.
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fetches := cl.PollFetches(pctx)
		cancel()
		var n int64
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			bytes += int64(len(r.Value))
		})
		now := time.Now()
		if n > 0 {
			got += n
			last = now
			continue
		}
		if got >= want || now.Sub(last) > cfg.ConsumeTimeout {
			break
		}
	}
	out.Records, out.Bytes = got, bytes
	out.Seconds = last.Sub(start).Seconds()
	out.RecordsPerSec = rate(float64(got), out.Seconds)
	out.MBPerSec = rate(float64(bytes)/1e6, out.Seconds)
	out.Complete = got == want
	fmt.Fprintf(stderr, "[%s] read back %d committed records of %d from %s%s\n", cs.label(), got, want, topic, clearTail)
	if err := ctx.Err(); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("the output topic %s holds %d committed records, want exactly the %d copied (a duplicate or a loss)", topic, got, want)
	}
	return nil
}
