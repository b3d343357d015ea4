// Command flowapp is the StoatFlow side of flowbench: one of the benchmark
// topologies, run as its own process so that flowbench can time it, read
// its CPU use and kill or restart it.
//
//	flowapp --mode wordcount --app-id X --bootstrap 127.0.0.1:9092 --input wc-input --output wc-out
//	flowapp --mode windowed  ... --window 60s [--windowed-impl processor]
//	flowapp --mode fill      ... (materializes the input in the store "big")
//
// It prints, on stdout, lines that flowbench reads:
//
//	PROGRESS <unix ms> <n> <s>  every 50 ms: n records seen by the counting
//	                         step (the aggregation in wordcount and windowed,
//	                         the source in fill), s input records read
//	READY <unix ms>          once App.Ready is true (stores restored)
//
// --cpuprofile writes a CPU profile of the whole run (stopped on SIGTERM);
// --pprof serves net/http/pprof. Both live only in this binary: the
// library has no profiling hooks.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow"
)

// counter counts the records the counting step saw; source the records
// read from the input (flowbench starts its clock at the first).
var counter, source atomic.Int64

func main() {
	mode := flag.String("mode", "wordcount", "wordcount | windowed | fill")
	appID := flag.String("app-id", "", "application id (names the group and the internal topics)")
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "bootstrap servers")
	guarantee := flag.String("guarantee", "exactly-once", "exactly-once | at-least-once")
	input := flag.String("input", "", "input topic")
	output := flag.String("output", "", "output topic (wordcount, windowed)")
	stateDir := flag.String("state-dir", "", "stoatflow.state.dir")
	httpPort := flag.Int("http-port", 0, "stoatflow.http.port (0: any free port)")
	threads := flag.Int("threads", 0, "stoatflow.threads (0: the library's default)")
	cacheKeys := flag.Int("cache-max-keys", 0, "stoatflow.state.cache-max-keys (0: every update forwarded)")
	window := flag.Duration("window", time.Minute, "tumbling window size (windowed)")
	windowImpl := flag.String("windowed-impl", "dsl", "windowed: dsl (WindowedBy + AggregateWindows) | processor (Processor API over a key-value store)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(log, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(log, err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *pprofAddr != "" {
		go func() { log.Info("pprof", "err", http.ListenAndServe(*pprofAddr, nil)) }()
	}

	cfg := stoatflow.Defaults()
	cfg.ApplicationID = *appID
	cfg.BootstrapServers = strings.Split(*bootstrap, ",")
	cfg.ProcessingGuarantee = stoatflow.Guarantee(*guarantee)
	cfg.State.Dir = *stateDir
	cfg.HTTP.Port = *httpPort
	cfg.HTTP.Host = "127.0.0.1"
	if *threads > 0 {
		cfg.Threads = *threads
	}
	cfg.State.CacheMaxKeys = *cacheKeys

	var topo *stoatflow.Topology
	switch *mode {
	case "wordcount":
		topo = wordcount(*input, *output)
	case "windowed":
		switch *windowImpl {
		case "dsl":
			topo = windowedDSL(*input, *output, *window)
		case "processor":
			topo = windowed(*input, *output, *window)
		default:
			fatal(log, fmt.Errorf("unknown --windowed-impl %q", *windowImpl))
		}
	case "fill":
		topo = fill(*input)
	default:
		fatal(log, fmt.Errorf("unknown --mode %q", *mode))
	}
	app, err := stoatflow.New(cfg, topo, stoatflow.WithLogger(log))
	if err != nil {
		fatal(log, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go report(ctx, app)
	if err := app.Run(ctx); err != nil {
		log.Error("flowapp stopped", "err", err)
		pprof.StopCPUProfile()
		if errors.Is(err, stoatflow.ErrFenced) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func fatal(log *slog.Logger, err error) {
	log.Error("flowapp", "err", err)
	os.Exit(1)
}

// report prints the progress and readiness lines flowbench reads.
func report(ctx context.Context, app *stoatflow.App) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	ready := false
	last := time.Time{}
	for {
		select {
		case <-ctx.Done():
			fmt.Printf("PROGRESS %d %d %d\n", time.Now().UnixMilli(), counter.Load(), source.Load())
			return
		case now := <-tick.C:
			if !ready && app.Ready() {
				ready = true
				fmt.Printf("READY %d\n", now.UnixMilli())
			}
			if now.Sub(last) >= 50*time.Millisecond {
				last = now
				fmt.Printf("PROGRESS %d %d %d\n", now.UnixMilli(), counter.Load(), source.Load())
			}
		}
	}
}

// wordcount is examples/wordcount's topology: lines split into lower-cased
// words, re-keyed by word (through a repartition topic), counted in the
// store "counts", every new count written to output. The count is
// Aggregate with the function Count uses, plus the progress counter.
func wordcount(input, output string) *stoatflow.Topology {
	t := stoatflow.NewTopology()
	lines := stoatflow.Source(t, stoatflow.String, stoatflow.String, []string{input}).Peek(func(string, string) { source.Add(1) })
	words := stoatflow.FlatMapValues(lines, func(line string) []string {
		return strings.Fields(strings.ToLower(line))
	})
	g := stoatflow.GroupBy(words, func(_, w string) string { return w }, stoatflow.String, stoatflow.String)
	counts := stoatflow.Aggregate(g, "counts", func() int64 { return 0 }, func(_ string, _ string, n int64) int64 {
		counter.Add(1)
		return n + 1
	}, stoatflow.Int64)
	counts.ToStream().To(output, stoatflow.String, stoatflow.Decimal)
	return t
}

// windowedDSL counts records per key in tumbling windows of size with no
// grace (Kafka Streams' TimeWindows.ofSizeWithNoGrace) through the DSL's
// WindowedBy and AggregateWindows (Count plus the progress counter); every
// new count goes to output keyed "<key>@<window start ms>", as 8-byte
// big-endian.
func windowedDSL(input, output string, size time.Duration) *stoatflow.Topology {
	t := stoatflow.NewTopology()
	src := stoatflow.Source(t, stoatflow.String, stoatflow.Bytes, []string{input}).Peek(func(string, []byte) { source.Add(1) })
	tw := stoatflow.WindowedBy(src.GroupByKey(stoatflow.String, stoatflow.Bytes), stoatflow.Tumbling(size, 0))
	counts := stoatflow.AggregateWindows(tw, "win-counts", func() int64 { return 0 }, func(_ string, _ []byte, n int64) int64 {
		counter.Add(1)
		return n + 1
	}, stoatflow.Int64)
	out := stoatflow.SelectKey(counts.ToStream(), func(w stoatflow.Windowed[string], _ int64) string {
		return w.Key + "@" + strconv.FormatInt(w.Start.UnixMilli(), 10)
	})
	out.To(output, stoatflow.String, stoatflow.Int64)
	return t
}

// windowed counts records per key in tumbling windows of size, with the
// low-level Processor API over a key-value store whose key is the record
// key, a NUL and the window start (8 bytes big-endian): the DSL has no
// windowed aggregation yet. Like Kafka Streams' TimeWindows with no grace,
// a record whose window has closed (its end is at or before the task's
// stream time) is dropped. The output is keyed "<key>@<window start ms>"
// with the window's new count, as 8-byte big-endian.
func windowed(input, output string, size time.Duration) *stoatflow.Topology {
	t := stoatflow.NewTopology()
	src := stoatflow.Source(t, stoatflow.String, stoatflow.Bytes, []string{input}).Peek(func(string, []byte) { source.Add(1) })
	stoatflow.AddKeyValueStore(t, "win-counts", stoatflow.Bytes, stoatflow.Int64)
	out := stoatflow.Process(src, "window-count", func() stoatflow.Processor[string, []byte, string, int64] {
		return &windowCount{size: size.Milliseconds()}
	}, "win-counts")
	out.To(output, stoatflow.String, stoatflow.Int64)
	return t
}

type windowCount struct {
	size int64
	ctx  stoatflow.ProcessorContext[string, int64]
	kv   stoatflow.KeyValueStore[[]byte, int64]
	key  []byte
}

func (w *windowCount) Init(ctx stoatflow.ProcessorContext[string, int64]) error {
	w.ctx = ctx
	var err error
	w.kv, err = stoatflow.KeyValueStoreOf[[]byte, int64](ctx.Store("win-counts"))
	return err
}

func (w *windowCount) Process(r stoatflow.Record[string, []byte]) error {
	ts := r.Timestamp.UnixMilli()
	start := ts - ts%w.size
	if start+w.size <= w.ctx.StreamTime().UnixMilli() {
		w.ctx.Counter("dropped-late", 1)
		return nil
	}
	counter.Add(1)
	w.key = append(append(w.key[:0], r.Key...), 0)
	w.key = binary.BigEndian.AppendUint64(w.key, uint64(start))
	n, _, err := w.kv.Get(w.key)
	if err != nil {
		return err
	}
	n++
	if err := w.kv.Put(w.key, n); err != nil {
		return err
	}
	w.ctx.Forward(stoatflow.Record[string, int64]{Key: r.Key + "@" + strconv.FormatInt(start, 10), Value: n, Timestamp: r.Timestamp})
	return nil
}

// fill materializes the input, the latest value per key, in the store
// "big" (the same shape as Kafka Streams' groupByKey().reduce()): the
// store flowbench's restore phase deletes and rebuilds.
func fill(input string) *stoatflow.Topology {
	t := stoatflow.NewTopology()
	src := stoatflow.Source(t, stoatflow.String, stoatflow.Bytes, []string{input})
	src = src.Peek(func(string, []byte) { counter.Add(1); source.Add(1) })
	src.GroupByKey(stoatflow.String, stoatflow.Bytes).Reduce("big", func(_, v []byte) []byte { return v })
	return t
}
