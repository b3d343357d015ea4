package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Command runs `moonmq bench` with the given arguments (without the
// "bench" word itself). Progress goes to stderr and the summary table to
// stdout. It returns nil after printing usage for -h, and an error when the
// arguments are invalid, the context is cancelled or any case failed.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	return Run(ctx, cfg, stdout, stderr)
}

// Run executes every case of cfg against the brokers one after another and
// reports the results. cfg is normally produced by Command's flag parsing;
// all of its fields must be set.
func Run(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	rep := &Report{
		Version:    ReportVersion,
		Target:     cfg.Name,
		Brokers:    strings.Join(cfg.Brokers, ","),
		Tool:       "moonmq bench",
		Started:    time.Now().UTC(),
		RecordSize: cfg.RecordSize,
		Host:       HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU()},
		Results:    []CaseResult{},
	}
	if cfg.Records > 0 {
		rep.Records = cfg.Records
	} else {
		rep.Duration = cfg.Duration.Seconds()
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("partitioner=%s linger=%s max-buffered=%d compression=none producers=%d txn-size=%d", cfg.Partitioner, cfg.Linger, cfg.MaxBuffered, cfg.Producers, cfg.TxnSize))

	adminCl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return fmt.Errorf("bench: admin client: %w", err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)

	pool := NewValuePool(cfg.RecordSize)
	var failed int
	for _, cs := range cfg.cases() {
		if ctx.Err() != nil {
			break
		}
		res := runCase(ctx, cfg, adm, pool, cs, stderr)
		if res.Error != "" {
			failed++
		}
		rep.Results = append(rep.Results, res)
	}
	if err := WriteTable(stdout, rep); err != nil {
		return err
	}
	if cfg.JSONPath != "" {
		if err := WriteJSON(cfg.JSONPath, rep); err != nil {
			return fmt.Errorf("bench: writing %s: %w", cfg.JSONPath, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("bench: %d of %d cases failed", failed, len(rep.Results))
	}
	return nil
}

// topicName returns the topic used by a case.
func topicName(cfg *Config, cs caseSpec) string {
	acks := fmt.Sprint(cs.Acks)
	if cs.Acks == -1 {
		acks = "all"
	}
	mode := "pipe"
	switch cs.Mode {
	case ModeOneAtATime:
		mode = "sync"
	case ModeTransactional:
		mode = "txn"
	case ModeTransform:
		mode = "ctp"
	}
	parts := []string{cfg.TopicPrefix}
	if cfg.RunID != "" {
		parts = append(parts, cfg.RunID)
	}
	parts = append(parts, "acks"+acks, fmt.Sprintf("p%d", cs.Partitions), mode)
	return strings.Join(parts, "-")
}

// createStep is the most partitions one CreateTopics or CreatePartitions
// asks for: Kafka's controller refuses an operation that would write more
// than 10,000 metadata records (max.records.per.user.op), one per
// partition and one for the topic, with POLICY_VIOLATION.
const createStep = 5000

// setupTimeout bounds the work before a case's clock starts that grows
// with its partitions (creating the topic, the first record to each
// partition): Kafka needs more than 30 s for 10,000 of them.
func setupTimeout(partitions int) time.Duration {
	return 30*time.Second + time.Duration(partitions)*10*time.Millisecond
}

// CreateTopic creates topic with partitions partitions, createStep at a
// time, and waits until each has a leader, within setupTimeout.
func CreateTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	cctx, cancel := context.WithTimeout(ctx, setupTimeout(partitions))
	defer cancel()
	// Replication factor -1: the broker's default, so the same command
	// benchmarks a single node and a replication group (whose topics
	// live on every replica).
	first := min(partitions, createStep)
	resp, err := adm.CreateTopic(cctx, int32(first), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	for n := first; err == nil && n < partitions; {
		n = min(n+createStep, partitions)
		var rs kadm.CreatePartitionsResponses
		if rs, err = adm.UpdatePartitions(cctx, n, topic); err == nil {
			err = rs.Error()
		}
	}
	// Kafka answers CreateTopics before every partition has a leader (its
	// metadata reaches the broker later); a produce before then fails with
	// UNKNOWN_TOPIC_OR_PARTITION.
	for err == nil && leaders(cctx, adm, topic) < partitions {
		time.Sleep(100 * time.Millisecond)
		err = cctx.Err()
	}
	return err
}

// leaders counts the partitions of topic that Metadata gives a leader.
func leaders(ctx context.Context, adm *kadm.Client, topic string) int {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range md.Topics[topic].Partitions {
		if p.Err == nil && p.Leader >= 0 {
			n++
		}
	}
	return n
}

// runCase runs one case: create the topic, produce, consume, clean up.
func runCase(ctx context.Context, cfg *Config, adm *kadm.Client, pool *ValuePool, cs caseSpec, stderr io.Writer) CaseResult {
	res := CaseResult{
		Case:       cs.label(),
		Acks:       cs.Acks,
		Partitions: cs.Partitions,
		Mode:       string(cs.Mode),
		Topic:      topicName(cfg, cs),
	}
	if !cfg.NoCreate {
		err := CreateTopic(ctx, adm, res.Topic, cs.Partitions)
		if err != nil {
			res.Error = fmt.Sprintf("creating topic %s: %v", res.Topic, err)
			fmt.Fprintf(stderr, "[%s] %s\n", res.Case, res.Error)
			return res
		}
		if !cfg.KeepTopics {
			defer deleteTopic(ctx, adm, res.Case, res.Topic, stderr)
		}
	}

	if cs.Mode == ModeTransform {
		// It fills its input and meters only its measured loop.
		if err := transformCase(ctx, cfg, adm, pool, cs, res.Topic, &res, stderr); err != nil {
			res.Error = err.Error()
		}
		return res
	}

	meter, err := startUsage(cfg.BrokerPIDs)
	if err != nil {
		res.Error = fmt.Sprintf("measuring the broker processes: %v", err)
		return res
	}
	// One produce phase, whichever the mode, measured by the one meter.
	var written int64
	if cs.Mode == ModeEndToEnd {
		err = endToEnd(ctx, cfg, pool, cs, res.Topic, &res, stderr)
	} else {
		written, err = produce(ctx, cfg, pool, cs, res.Topic, &res.Produce, stderr)
	}
	if meter != nil {
		u, uerr := meter.stop(res.Produce.Records)
		if uerr != nil && err == nil {
			err = fmt.Errorf("measuring the broker processes: %v", uerr)
		}
		if uerr == nil {
			res.Broker = &u
		}
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if cs.Mode == ModeEndToEnd {
		return res // its consumer ran beside the producer
	}
	if cfg.NoConsume {
		return res
	}
	if err := consume(ctx, cfg, cs, res.Topic, written, &res.Consume, stderr); err != nil {
		res.Error = err.Error()
	}
	return res
}

// deleteTopic deletes a case's topic, logging a failure.
func deleteTopic(ctx context.Context, adm *kadm.Client, label, topic string, stderr io.Writer) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if resp, err := adm.DeleteTopic(dctx, topic); err == nil && resp.Err != nil {
		fmt.Fprintf(stderr, "[%s] deleting topic %s: %v\n", label, topic, resp.Err)
	} else if err != nil {
		fmt.Fprintf(stderr, "[%s] deleting topic %s: %v\n", label, topic, err)
	}
}

// producerOpts returns the kgo options for a case's producer.
func producerOpts(cfg *Config, cs caseSpec, topic string, idx int) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(cfg.MaxBuffered),
		// As long as the warm-up may take: its records, one to each
		// partition, are all buffered at once, and with 10,000
		// partitions Kafka took longer than 30 s to take them.
		kgo.RecordDeliveryTimeout(setupTimeout(cs.Partitions)),
	}
	switch cs.Acks {
	case -1:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case 0:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	}
	if cs.Acks != -1 {
		// franz-go only supports idempotent producing with acks=all.
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(cfg.MaxInflight))
	}
	if cs.Mode == ModeTransactional {
		opts = append(opts, kgo.TransactionalID(fmt.Sprintf("moonmq-bench-%s-%d", topic, idx)), kgo.TransactionTimeout(60*time.Second))
	}
	switch cfg.Partitioner {
	case "roundrobin":
		opts = append(opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	case "sticky":
		// franz-go's default ("uniform") looks at every partition's
		// backlog each time it leaves one: with 10,000 partitions that
		// was 41% of the bench client's CPU, and the client, not the
		// broker, set the rate.
		opts = append(opts, kgo.RecordPartitioner(kgo.StickyPartitioner()))
	}
	return opts
}

// touchEveryPartition writes one record to each of topic's partitions
// with a client of its own, and returns how many it wrote.
func touchEveryPartition(ctx context.Context, cfg *Config, cs caseSpec, topic string, pool *ValuePool) (int64, error) {
	opts := append(producerOpts(cfg, caseSpec{Partitions: cs.Partitions, Acks: -1, Mode: ModePipelined}, topic, 0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("warm-up client: %w", err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, cs.Partitions)
	for i := range recs {
		recs[i] = &kgo.Record{Partition: int32(i), Value: pool.Next()}
	}
	wctx, cancel := context.WithTimeout(ctx, setupTimeout(cs.Partitions))
	defer cancel()
	if err := cl.ProduceSync(wctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("warm-up produce to every partition of %s: %w", topic, err)
	}
	return int64(len(recs)), nil
}

// startKey carries a record's send time in its Context.
type startKey struct{}

// produce runs the producer phase of a case, fills out and returns the
// number of records the broker acknowledged (including warm-up records),
// which is what the consumer must read back. With --producers N it runs N
// clients at once (each with its own transactional id), sharing the
// record budget and the latency histogram.
func produce(ctx context.Context, cfg *Config, pool *ValuePool, cs caseSpec, topic string, out *ProduceResult, stderr io.Writer) (int64, error) {
	n := max(cfg.Producers, 1)
	clients := make([]*kgo.Client, n)
	for i := range clients {
		cl, err := kgo.NewClient(producerOpts(cfg, cs, topic, i)...)
		if err != nil {
			return 0, fmt.Errorf("producer client: %w", err)
		}
		defer cl.Close()
		clients[i] = cl
	}

	// Warm up: one record per partition and client so that metadata is
	// loaded and connections are open before the clock starts.
	var warmed int64
	for _, cl := range clients {
		warm := make([]*kgo.Record, cs.Partitions)
		for i := range warm {
			warm[i] = &kgo.Record{Value: pool.Next()}
		}
		wctx, cancel := context.WithTimeout(ctx, setupTimeout(cs.Partitions))
		var err error
		if cs.Mode == ModeTransactional {
			err = cl.BeginTransaction()
		}
		if err == nil {
			err = cl.ProduceSync(wctx, warm...).FirstErr()
		}
		if err == nil && cs.Mode == ModeTransactional {
			err = cl.EndTransaction(wctx, kgo.TryCommit)
		}
		cancel()
		if err != nil {
			return 0, fmt.Errorf("warm-up produce to %s: %w", topic, err)
		}
		warmed += int64(len(warm))
	}
	if cfg.Partitioner != "roundrobin" {
		// A sticky partitioner sends the warm-up above to a few
		// partitions only; the first record to every other one would
		// then land inside the measured time, with the once-per-partition
		// work it costs a broker (Kafka's and MoonMQ's leader epoch
		// checkpoint, the first segment's pages), which is not what a
		// case measures.
		touched, err := touchEveryPartition(ctx, cfg, cs, topic, pool)
		if err != nil {
			return 0, err
		}
		warmed += touched
	}

	var (
		hist   = new(Histogram)
		acked  atomic.Int64
		failed atomic.Int64
		errMu  sync.Mutex
		first  error
	)
	onDone := func(r *kgo.Record, err error) {
		// Not r.Timestamp: franz-go may rewrite it (millisecond
		// precision), which biased p50 by half a millisecond.
		lat := time.Since(r.Context.Value(startKey{}).(time.Time))
		if err != nil {
			failed.Add(1)
			errMu.Lock()
			if first == nil {
				first = err
			}
			errMu.Unlock()
			return
		}
		hist.Record(lat)
		acked.Add(1)
	}

	prog := StartProgress(stderr, cfg.ProgressInterval, cs.label(), "produce", &acked, cfg.Records, cfg.RecordSize, cfg.Duration)
	start := time.Now()
	w := producerWork{cfg: cfg, pool: pool, mode: cs.Mode, deadline: start.Add(cfg.Duration), onDone: onDone, failed: &failed, acked: &acked}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cl := range clients {
		budget := int64(0)
		if cfg.Records > 0 {
			budget = cfg.Records / int64(n)
			if int64(i) < cfg.Records%int64(n) {
				budget++
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.run(ctx, cl, budget)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		prog.Stop()
		return 0, err
	}
	elapsed := time.Since(start)
	prog.Stop()

	out.fill(acked.Load(), failed.Load(), cfg.RecordSize, elapsed, hist)
	fmt.Fprintf(stderr, "\r[%s] produced %d records in %.2fs: %s rec/s %.1f MB/s p50 %.3f ms p99 %.3f ms%s\n",
		cs.label(), out.Records, out.Seconds, humanRate(out.RecordsPerSec), out.MBPerSec, out.P50Ms, out.P99Ms, clearTail)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if out.Errors > 0 {
		fmt.Fprintf(stderr, "[%s] %d produce errors, first: %v\n", cs.label(), out.Errors, first)
		if out.Records == 0 {
			return 0, fmt.Errorf("every produce failed: %v", first)
		}
	}
	return out.Records + warmed, nil
}

// producerWork is what every producer client of a case shares.
type producerWork struct {
	cfg      *Config
	pool     *ValuePool
	mode     Mode
	deadline time.Time
	onDone   func(*kgo.Record, error)
	failed   *atomic.Int64
	acked    *atomic.Int64
}

// run produces with one client until its budget of records (0: until the
// deadline) is spent.
func (w *producerWork) run(ctx context.Context, cl *kgo.Client, budget int64) error {
	more := func(n int64) bool {
		if ctx.Err() != nil {
			return false
		}
		if budget > 0 {
			return n < budget
		}
		return time.Now().Before(w.deadline)
	}
	record := func() *kgo.Record {
		t0 := time.Now()
		return &kgo.Record{Value: w.pool.Next(), Timestamp: t0, Context: context.WithValue(ctx, startKey{}, t0)}
	}
	var n int64
	switch w.mode {
	case ModePipelined:
		var wg sync.WaitGroup
		for ; more(n); n++ {
			wg.Add(1)
			cl.Produce(ctx, record(), func(r *kgo.Record, err error) {
				w.onDone(r, err)
				wg.Done()
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			cl.Close() // fails whatever is still buffered
			<-done
		}
	case ModeTransactional:
		for more(n) {
			if err := cl.BeginTransaction(); err != nil {
				return fmt.Errorf("begin transaction: %w", err)
			}
			for i := 0; i < w.cfg.TxnSize; i++ {
				cl.Produce(ctx, record(), w.onDone)
				n++
			}
			if err := cl.Flush(ctx); err != nil {
				return fmt.Errorf("flush transaction: %w", err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return fmt.Errorf("commit transaction: %w", err)
			}
		}
	case ModeOneAtATime:
		for ; more(n); n++ {
			r := record()
			w.onDone(r, cl.ProduceSync(ctx, r).FirstErr())
			if f := w.failed.Load(); f >= 100 && f > w.acked.Load() {
				break // the broker is clearly failing; do not spin
			}
		}
	}
	return nil
}

// consume reads the case's topic from the start until want records were
// seen or no record arrived for cfg.ConsumeTimeout.
func consume(ctx context.Context, cfg *Config, cs caseSpec, topic string, want int64, out *ConsumeResult, stderr io.Writer) error {
	var got atomic.Int64
	start := time.Now()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return fmt.Errorf("consumer client: %w", err)
	}
	defer cl.Close()

	prog := StartProgress(stderr, cfg.ProgressInterval, cs.label(), "consume", &got, want, cfg.RecordSize, cfg.Duration)
	var (
		bytes   int64
		last    = start
		lastErr error
	)
	for got.Load() < want && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				lastErr = err
			}
		})
		var n, b int64
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			b += int64(len(r.Value))
		})
		now := time.Now()
		if n > 0 {
			got.Add(n)
			bytes += b
			last = now
		} else if now.Sub(last) > cfg.ConsumeTimeout {
			break
		}
	}
	prog.Stop()

	out.Records = got.Load()
	out.Bytes = bytes
	out.Seconds = last.Sub(start).Seconds()
	out.RecordsPerSec = rate(float64(out.Records), out.Seconds)
	out.MBPerSec = rate(float64(out.Bytes)/1e6, out.Seconds)
	out.Complete = out.Records >= want
	fmt.Fprintf(stderr, "\r[%s] consumed %d/%d records in %.2fs: %s rec/s %.1f MB/s%s\n",
		cs.label(), out.Records, want, out.Seconds, humanRate(out.RecordsPerSec), out.MBPerSec, clearTail)
	if err := ctx.Err(); err != nil {
		return err
	}
	if !out.Complete {
		msg := fmt.Sprintf("consumed only %d of %d records within the %s idle timeout", out.Records, want, cfg.ConsumeTimeout)
		if lastErr != nil {
			msg += fmt.Sprintf(" (last fetch error: %v)", lastErr)
		}
		return errors.New(msg)
	}
	return nil
}

// clearTail pads a progress line so it overwrites a longer previous one.
const clearTail = "          "

// Progress periodically rewrites a one-line status of a benchmark phase on
// a writer (normally stderr), in the form
//
//	\r[acks=-1 p=8 pipelined] produce 12.3k rec/s 12.6 MB/s 4.1s/10s
//
// where the rate is that of the last interval.
type Progress struct {
	done chan struct{}
	wg   sync.WaitGroup
}

// StartProgress starts refreshing the status line every interval until Stop.
// count is the number of records done so far; when total is positive the
// line shows count/total, otherwise elapsed/duration.
func StartProgress(w io.Writer, interval time.Duration, label, phase string, count *atomic.Int64, total int64, recordSize int, duration time.Duration) *Progress {
	p := &Progress{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		start := time.Now()
		t := time.NewTicker(interval)
		defer t.Stop()
		prevN, prevT := int64(0), start
		for {
			select {
			case <-p.done:
				return
			case now := <-t.C:
				n := count.Load()
				r := rate(float64(n-prevN), now.Sub(prevT).Seconds())
				prevN, prevT = n, now
				where := fmt.Sprintf("%.1fs/%s", now.Sub(start).Seconds(), duration)
				if total > 0 {
					where = fmt.Sprintf("%d/%d rec %.1fs", n, total, now.Sub(start).Seconds())
				}
				fmt.Fprintf(w, "\r[%s] %s %s rec/s %.1f MB/s %s%s", label, phase, humanRate(r),
					r*float64(recordSize)/1e6, where, clearTail)
			}
		}
	}()
	return p
}

// Stop ends the refreshes; the caller then prints the phase's final line.
func (p *Progress) Stop() {
	close(p.done)
	p.wg.Wait()
}

// ValuePool hands out record values: consecutive, non-overlapping windows of
// a buffer of random bytes, so values are incompressible without paying for
// random generation on the hot path. Values are shared and must not be
// modified.
type ValuePool struct {
	buf  []byte
	size int
	off  atomic.Uint64
}

// poolBytes is the approximate size of the random buffer behind ValuePool.
const poolBytes = 8 << 20

// NewValuePool returns a pool of size-byte values.
func NewValuePool(size int) *ValuePool {
	n := max(poolBytes/size, 1) * size
	buf := make([]byte, n)
	rng := rand.NewChaCha8([32]byte(randomSeed()))
	_, _ = rng.Read(buf)
	return &ValuePool{buf: buf, size: size}
}

// randomSeed returns 32 seed bytes for the value generator.
func randomSeed() []byte {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	return seed
}

// Next returns the next record value. It is safe for concurrent use.
func (p *ValuePool) Next() []byte {
	slots := uint64(len(p.buf) / p.size)
	o := int((p.off.Add(1)-1)%slots) * p.size
	return p.buf[o : o+p.size : o+p.size]
}
