// Command natsbench runs the MoonMQ benchmark shape against NATS JetStream
// and writes the same report (github.com/moonmq/moonmq/internal/bench.Report)
// as `moonmq bench`, so bench/run.sh can compare the two.
//
// Unless --url is given it embeds a nats-server with JetStream file storage
// in a temporary directory and talks to it over loopback TCP. JetStream is
// left at its defaults: it does not fsync each message (it syncs every
// 2 minutes) unless --sync-always is set.
//
// With --replicas 3 (or 5) it instead starts that many nats-server nodes as
// child processes of itself (natsbench --serve-node), clustered over loopback
// routes, and creates every stream with that replication factor. Separate
// processes, not one process with three servers, so that the servers and the
// load generator each have their own runtime and garbage collector, as the
// three MoonMQ replicas and `moonmq bench` do in bench/replication.sh.
//
// Mapping of the Kafka cases onto JetStream:
//   - a Kafka partition is a JetStream stream (R1 or R--replicas, file
//     storage, one subject each): a stream is JetStream's unit of ordering and storage, so
//     --partitions N creates N streams and publishes round-robin over them;
//   - JetStream has a single acknowledgement level (stored on the R1 stream
//     leader; for R3 stored by a majority of the stream's Raft group), so the --acks values only label cases; the default runs
//     acks=-1 only;
//   - pipelined = PublishAsync with a bounded window of --window
//     unacknowledged messages; latency is measured from the publish call to
//     the PubAck, observed in publish order;
//   - one-at-a-time = synchronous Publish, one message after another;
//   - consume = one ordered consumer per stream, all running concurrently,
//     reading from the first message.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/bench"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// config is natsbench's command line.
type config struct {
	url            string
	storeDir       string
	syncAlways     bool
	replicas       int
	name           string
	runID          string
	records        int64
	duration       time.Duration
	recordSize     int
	acks           []int
	partitions     []int
	modes          []bench.Mode
	window         int
	jsonPath       string
	consumeTimeout time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == serveNodeArg {
		// A cluster node started by startCluster.
		if err := serveNode(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "natsbench node: %v\n", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "natsbench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("natsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	var acks, partitions, modes string
	fs.StringVar(&cfg.url, "url", "", "NATS server URL; empty embeds a JetStream server")
	fs.StringVar(&cfg.storeDir, "store-dir", "", "JetStream store directory of the embedded server (default: a temporary directory)")
	fs.BoolVar(&cfg.syncAlways, "sync-always", false, "embedded server fsyncs every message (JetStream sync_interval: always)")
	fs.IntVar(&cfg.replicas, "replicas", 1, "stream replicas; above 1, start that many clustered nats-server processes (ignored with --url except for the stream config)")
	fs.StringVar(&cfg.name, "name", "nats-jetstream", "label of the target in reports")
	fs.StringVar(&cfg.runID, "run-id", strconv.FormatInt(time.Now().Unix(), 36), "unique part of stream names")
	fs.Int64Var(&cfg.records, "records", 0, "messages to publish per case (overrides --duration when > 0)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to publish per case")
	fs.IntVar(&cfg.recordSize, "record-size", 1024, "message payload size in bytes (random, incompressible)")
	fs.StringVar(&acks, "acks", "-1", "acks labels to run (JetStream has one ack level; see package doc)")
	fs.StringVar(&partitions, "partitions", "1,8", "comma-separated stream counts (Kafka partitions) to run")
	fs.StringVar(&modes, "modes", "pipelined,one-at-a-time", "comma-separated modes: pipelined, one-at-a-time")
	fs.IntVar(&cfg.window, "window", bench.DefaultMaxBuffered, "max unacknowledged async publishes in pipelined mode")
	fs.StringVar(&cfg.jsonPath, "json", "", "write results as JSON to this file")
	fs.DurationVar(&cfg.consumeTimeout, "consume-timeout", 15*time.Second, "stop consuming after this long without progress")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, f := range strings.Split(acks, ",") {
		switch strings.TrimSpace(f) {
		case "-1", "all":
			cfg.acks = append(cfg.acks, -1)
		case "1":
			cfg.acks = append(cfg.acks, 1)
		case "0":
			cfg.acks = append(cfg.acks, 0)
		default:
			return nil, fmt.Errorf("invalid acks %q", f)
		}
	}
	for _, f := range strings.Split(partitions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid partition count %q", f)
		}
		cfg.partitions = append(cfg.partitions, n)
	}
	for _, f := range strings.Split(modes, ",") {
		switch strings.TrimSpace(f) {
		case "pipelined":
			cfg.modes = append(cfg.modes, bench.ModePipelined)
		case "one-at-a-time":
			cfg.modes = append(cfg.modes, bench.ModeOneAtATime)
		default:
			return nil, fmt.Errorf("invalid mode %q", f)
		}
	}
	switch {
	case cfg.recordSize <= 0:
		return nil, errors.New("--record-size must be positive")
	case cfg.records == 0 && cfg.duration <= 0:
		return nil, errors.New("one of --records or --duration must be positive")
	case cfg.window <= 0:
		return nil, errors.New("--window must be positive")
	case cfg.replicas < 1 || cfg.replicas > 5:
		return nil, errors.New("--replicas must be between 1 and 5")
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}

	url := cfg.url
	if url == "" {
		dir := cfg.storeDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "natsbench-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		if cfg.replicas > 1 {
			cl, err := startCluster(dir, cfg.replicas, cfg.syncAlways, stderr)
			if err != nil {
				return err
			}
			defer cl.stop()
			url = strings.Join(cl.urls, ",")
		} else {
			srv, err := startServer(dir, cfg.syncAlways)
			if err != nil {
				return err
			}
			defer srv.Shutdown()
			url = srv.ClientURL()
		}
	}
	nc, err := nats.Connect(url, nats.Name("natsbench"))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.window+1))
	if err != nil {
		return err
	}
	if cfg.replicas > 1 {
		// A fresh cluster answers JetStream API requests only once its meta
		// group has elected a leader.
		if err := waitJetStream(ctx, js, 30*time.Second); err != nil {
			return err
		}
	}

	rep := &bench.Report{
		Version:    bench.ReportVersion,
		Target:     cfg.name,
		Brokers:    url,
		Tool:       "natsbench",
		Started:    time.Now().UTC(),
		RecordSize: cfg.recordSize,
		Host:       bench.HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU()},
		Results:    []bench.CaseResult{},
		Notes: []string{
			fmt.Sprintf("JetStream file storage, R%d, one stream per partition, sync-always=%v (default JetStream syncs every 2m, not per message)", cfg.replicas, cfg.syncAlways),
			fmt.Sprintf("pipelined window=%d async publishes; acks labels only (JetStream acks once stored)", cfg.window),
		},
	}
	if cfg.records > 0 {
		rep.Records = cfg.records
	} else {
		rep.Duration = cfg.duration.Seconds()
	}
	pool := bench.NewValuePool(cfg.recordSize)
	failed := 0
	n := 0
	for _, a := range cfg.acks {
		for _, p := range cfg.partitions {
			for _, m := range cfg.modes {
				if ctx.Err() != nil {
					break
				}
				n++
				res := runCase(ctx, cfg, js, pool, n, a, p, m, stderr)
				if res.Error != "" {
					failed++
				}
				rep.Results = append(rep.Results, res)
			}
		}
	}
	if err := bench.WriteTable(stdout, rep); err != nil {
		return err
	}
	if cfg.jsonPath != "" {
		if err := bench.WriteJSON(cfg.jsonPath, rep); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(rep.Results))
	}
	return nil
}

// startServer starts an embedded JetStream server on a random loopback port.
func startServer(dir string, syncAlways bool) (*server.Server, error) {
	opts := &server.Options{
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: syncAlways,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats-server did not become ready")
	}
	return srv, nil
}

// errNoSuitablePeers is JetStream's answer to a replicated stream asked
// for before its cluster has formed (its meta leader knows too few
// peers).
const errNoSuitablePeers jetstream.ErrorCode = 10005

// createStream creates a stream, asking again while the cluster has not
// formed: a three-server cluster just started answers "no suitable peers
// for placement" for a few seconds.
func createStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	for {
		_, err := js.CreateStream(ctx, sc)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errNoSuitablePeers {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the cluster did not form in time)", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runCase runs one case: create streams, publish, consume, delete streams.
func runCase(ctx context.Context, cfg *config, js jetstream.JetStream, pool *bench.ValuePool, idx, acks, partitions int, mode bench.Mode, stderr io.Writer) bench.CaseResult {
	label := fmt.Sprintf("acks=%d p=%d %s", acks, partitions, mode)
	res := bench.CaseResult{Case: label, Acks: acks, Partitions: partitions, Mode: string(mode)}
	streams := make([]string, partitions)
	subjects := make([]string, partitions)
	for i := range streams {
		streams[i] = fmt.Sprintf("BENCH_%s_%d_%d", cfg.runID, idx, i)
		subjects[i] = fmt.Sprintf("bench.%s.%d.%d", cfg.runID, idx, i)
	}
	res.Topic = fmt.Sprintf("BENCH_%s_%d_*", cfg.runID, idx)
	for i := range streams {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := createStream(cctx, js, jetstream.StreamConfig{
			Name:     streams[i],
			Subjects: []string{subjects[i]},
			Storage:  jetstream.FileStorage,
			Replicas: cfg.replicas,
		})
		cancel()
		if err != nil {
			res.Error = fmt.Sprintf("creating stream %s: %v", streams[i], err)
			return res
		}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, s := range streams {
			if err := js.DeleteStream(dctx, s); err != nil {
				fmt.Fprintf(stderr, "[%s] deleting stream %s: %v\n", label, s, err)
			}
		}
	}()

	written, err := publish(ctx, cfg, js, pool, label, subjects, mode, &res.Produce, stderr)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if err := consume(ctx, cfg, js, label, streams, written, &res.Consume, stderr); err != nil {
		res.Error = err.Error()
	}
	return res
}

// publish runs the producer phase and returns how many messages were
// stored, warm-up included.
func publish(ctx context.Context, cfg *config, js jetstream.JetStream, pool *bench.ValuePool, label string, subjects []string, mode bench.Mode, out *bench.ProduceResult, stderr io.Writer) (int64, error) {
	// Warm up: one synchronous publish per stream.
	for _, s := range subjects {
		if _, err := js.Publish(ctx, s, pool.Next()); err != nil {
			return 0, fmt.Errorf("warm-up publish to %s: %w", s, err)
		}
	}
	var (
		hist   = new(bench.Histogram)
		acked  atomic.Int64
		failed atomic.Int64
		first  atomic.Value
	)
	fail := func(err error) {
		failed.Add(1)
		first.CompareAndSwap(nil, err)
	}
	prog := bench.StartProgress(stderr, 500*time.Millisecond, label, "produce", &acked, cfg.records, cfg.recordSize, cfg.duration)
	start := time.Now()
	deadline := start.Add(cfg.duration)
	more := func(n int64) bool {
		if cfg.records > 0 {
			return n < cfg.records && ctx.Err() == nil
		}
		return time.Now().Before(deadline) && ctx.Err() == nil
	}
	switch mode {
	case bench.ModePipelined:
		type pending struct {
			t0 time.Time
			f  jetstream.PubAckFuture
		}
		window := make(chan pending, cfg.window)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // observe acks in publish order
			defer wg.Done()
			for p := range window {
				select {
				case <-p.f.Ok():
					hist.Record(time.Since(p.t0))
					acked.Add(1)
				case err := <-p.f.Err():
					fail(err)
				case <-ctx.Done():
					fail(ctx.Err())
				}
			}
		}()
		for n := int64(0); more(n); n++ {
			t0 := time.Now()
			// Our window bounds what is in flight; the library's stall
			// limit (200 ms by default) is only a backstop, and an R3
			// PubAck can take longer than that under load, which would
			// count a message that was merely slow as failed.
			f, err := js.PublishAsync(subjects[n%int64(len(subjects))], pool.Next(), jetstream.WithStallWait(30*time.Second))
			if err != nil {
				fail(err)
				if failed.Load() > 1000 && acked.Load() == 0 {
					break
				}
				continue
			}
			window <- pending{t0, f}
		}
		close(window)
		wg.Wait()
	case bench.ModeOneAtATime:
		for n := int64(0); more(n); n++ {
			t0 := time.Now()
			if _, err := js.Publish(ctx, subjects[n%int64(len(subjects))], pool.Next()); err != nil {
				fail(err)
				if f := failed.Load(); f >= 100 && f > acked.Load() {
					break
				}
				continue
			}
			hist.Record(time.Since(t0))
			acked.Add(1)
		}
	}
	elapsed := time.Since(start)
	prog.Stop()

	out.Records = acked.Load()
	out.Errors = failed.Load()
	out.Bytes = out.Records * int64(cfg.recordSize)
	out.Seconds = elapsed.Seconds()
	out.RecordsPerSec = bench.Rate(float64(out.Records), out.Seconds)
	out.MBPerSec = bench.Rate(float64(out.Bytes)/1e6, out.Seconds)
	out.P50Ms = bench.Millis(hist.Quantile(50))
	out.P99Ms = bench.Millis(hist.Quantile(99))
	out.P999Ms = bench.Millis(hist.Quantile(99.9))
	out.MaxMs = bench.Millis(hist.Max())
	fmt.Fprintf(stderr, "\r[%s] published %d messages in %.2fs: %.0f msg/s %.1f MB/s p50 %.3f ms p99 %.3f ms          \n",
		label, out.Records, out.Seconds, out.RecordsPerSec, out.MBPerSec, out.P50Ms, out.P99Ms)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if out.Errors > 0 {
		fmt.Fprintf(stderr, "[%s] %d publish errors, first: %v\n", label, out.Errors, first.Load())
		if out.Records == 0 {
			return 0, fmt.Errorf("every publish failed: %v", first.Load())
		}
	}
	return out.Records + int64(len(subjects)), nil
}

// consume reads every stream from the start with one ordered consumer per
// stream until want messages were seen in total or none arrived for
// cfg.consumeTimeout.
func consume(ctx context.Context, cfg *config, js jetstream.JetStream, label string, streams []string, want int64, out *bench.ConsumeResult, stderr io.Writer) error {
	var (
		got   atomic.Int64
		bytes atomic.Int64
		last  atomic.Int64 // unix nanos of the last message
		done  = make(chan struct{})
		once  sync.Once
	)
	start := time.Now()
	last.Store(start.UnixNano())
	prog := bench.StartProgress(stderr, 500*time.Millisecond, label, "consume", &got, want, cfg.recordSize, cfg.duration)
	var ccs []jetstream.ConsumeContext
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}()
	for _, s := range streams {
		c, err := js.OrderedConsumer(ctx, s, jetstream.OrderedConsumerConfig{})
		if err != nil {
			prog.Stop()
			return fmt.Errorf("ordered consumer on %s: %w", s, err)
		}
		cc, err := c.Consume(func(m jetstream.Msg) {
			bytes.Add(int64(len(m.Data())))
			last.Store(time.Now().UnixNano())
			if got.Add(1) >= want {
				once.Do(func() { close(done) })
			}
		})
		if err != nil {
			prog.Stop()
			return fmt.Errorf("consuming %s: %w", s, err)
		}
		ccs = append(ccs, cc)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			break wait
		case now := <-t.C:
			if now.Sub(time.Unix(0, last.Load())) > cfg.consumeTimeout {
				break wait
			}
		}
	}
	prog.Stop()
	out.Records = got.Load()
	out.Bytes = bytes.Load()
	out.Seconds = time.Unix(0, last.Load()).Sub(start).Seconds()
	out.RecordsPerSec = bench.Rate(float64(out.Records), out.Seconds)
	out.MBPerSec = bench.Rate(float64(out.Bytes)/1e6, out.Seconds)
	out.Complete = out.Records >= want
	fmt.Fprintf(stderr, "\r[%s] consumed %d/%d messages in %.2fs: %.0f msg/s %.1f MB/s          \n",
		label, out.Records, want, out.Seconds, out.RecordsPerSec, out.MBPerSec)
	if err := ctx.Err(); err != nil {
		return err
	}
	if !out.Complete {
		return fmt.Errorf("consumed only %d of %d messages within the %s idle timeout", out.Records, want, cfg.consumeTimeout)
	}
	return nil
}
