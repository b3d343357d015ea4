// Command flowbench measures StoatFlow against Kafka Streams and goka, in
// one run, on one single-node MoonMQ broker it starts itself:
//
//   - wordcount (lines of 10 words from a 10,000-word Zipf vocabulary):
//     throughput of N preloaded lines, exactly-once and at-least-once, and
//     end-to-end latency on a paced run at a fraction of the measured
//     capacity;
//   - windowed count (count per key in tumbling windows): throughput;
//   - restore: a store filled through the app (1M keys of 1 KiB by
//     default), its local state deleted, the time until the restarted app
//     is ready.
//
// Kafka Streams runs the topologies of ../kstreams (Maven, kafka-streams
// 4.3.1) with its defaults per guarantee; goka runs the word count of
// ./cmd/gokaapp. Results go to results/<timestamp>/ (results.md,
// results.json, logs, the StoatFlow CPU profile).
//
//	cd stoatflow/bench && go run ./cmd/flowbench            # full run, ~15 min
//	go run ./cmd/flowbench --quick                           # small sizes, ~5 min
//	go run ./cmd/flowbench -h                                # sizes and skips
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

type options struct {
	results       string
	moonmq        string
	flowapp       string
	partitions    int
	lines         int64
	cacheKeys     int
	threads       int
	vocab         int
	wordsPerLine  int
	windowRecords int64
	windowKeys    int
	window        time.Duration
	windowImpl    string
	windowSpan    time.Duration
	restoreKeys   int64
	restoreValue  int
	pacedDuration time.Duration
	pacedWarmup   time.Duration
	pacedFraction float64
	pacedRate     float64
	skip          map[string]bool
	profile       bool
	stall         time.Duration
	caseTimeout   time.Duration
	keep          bool
}

type bench struct {
	opt     options
	work    string
	results string
	runID   string
	br      *broker
	cl      *kgo.Client
	adm     *kadm.Client
	bins    struct{ moonmq, flowapp, gokaapp, java, ksClasspath string }
	vocab   []string
	started time.Time
}

func main() {
	var o options
	var skip string
	quick := flag.Bool("quick", false, "small sizes (about a third of the default run)")
	flag.StringVar(&o.results, "results", "", "results directory (default results/<timestamp>)")
	flag.StringVar(&o.moonmq, "moonmq", os.Getenv("MOONMQ_BINARY"), "prebuilt moonmq binary (default: build ./cmd/moonmq of the repository; env MOONMQ_BINARY)")
	flag.StringVar(&o.flowapp, "flowapp", "", "prebuilt flowapp binary (default: build ./cmd/flowapp against ../, the library in this tree)")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of every input, output and internal topic")
	flag.Int64Var(&o.lines, "lines", 200000, "wordcount: preloaded input lines")
	flag.IntVar(&o.vocab, "vocab", 10000, "wordcount: vocabulary size")
	flag.IntVar(&o.wordsPerLine, "words", 10, "wordcount: words per line")
	flag.Int64Var(&o.windowRecords, "window-records", 600000, "windowed: preloaded records")
	flag.IntVar(&o.windowKeys, "window-keys", 10000, "windowed: distinct keys")
	flag.DurationVar(&o.window, "window", time.Minute, "windowed: tumbling window size")
	flag.StringVar(&o.windowImpl, "windowed-impl", "dsl", "windowed, StoatFlow: dsl (WindowedBy + AggregateWindows) or processor (Processor API over a key-value store)")
	flag.DurationVar(&o.windowSpan, "window-span", 10*time.Minute, "windowed: event-time span of the preloaded records")
	flag.Int64Var(&o.restoreKeys, "restore-keys", 1000000, "restore: keys in the store")
	flag.IntVar(&o.restoreValue, "restore-value", 1024, "restore: value bytes")
	flag.DurationVar(&o.pacedDuration, "paced-duration", 15*time.Second, "latency: measured time of each paced run")
	flag.DurationVar(&o.pacedWarmup, "paced-warmup", 3*time.Second, "latency: unmeasured start of each paced run")
	flag.Float64Var(&o.pacedFraction, "paced-fraction", 0.5, "latency: paced rate as a fraction of the lowest steady wordcount rate of the guarantee")
	flag.Float64Var(&o.pacedRate, "paced-rate", 0, "latency: fixed paced rate in lines/s (overrides --paced-fraction)")
	flag.StringVar(&skip, "skip", "", "comma-separated parts to skip: kstreams, goka, cache (StoatFlow with its table cache), wordcount, latency, windowed, restore, alo, eos")
	flag.IntVar(&o.threads, "threads", 0, "stoatflow.threads of the StoatFlow runs (0: the library's default; Kafka Streams runs one stream thread)")
	flag.IntVar(&o.cacheKeys, "cache-max-keys", 100000, "stoatflow.state.cache-max-keys of the table-cache runs")
	flag.BoolVar(&o.profile, "profile", true, "CPU-profile the StoatFlow app during the wordcount exactly-once run")
	flag.DurationVar(&o.stall, "stall", 90*time.Second, "fail a case that makes no progress for this long")
	flag.DurationVar(&o.caseTimeout, "case-timeout", 10*time.Minute, "fail a case that takes longer")
	flag.BoolVar(&o.keep, "keep", false, "keep the broker's data and the apps' state (temporary directory) after the run")
	flag.Parse()
	if *quick {
		o.lines, o.windowRecords, o.restoreKeys = 50000, 200000, 250000
		o.pacedDuration, o.pacedWarmup = 8*time.Second, 2*time.Second
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.skip[s] = true
		}
	}
	b := &bench{opt: o, started: time.Now()}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		progressf("interrupted: stopping everything")
		killAll()
		if !o.keep && b.work != "" {
			os.RemoveAll(b.work)
		}
		os.Exit(130)
	}()
	err := b.run()
	killAll()
	if !o.keep && b.work != "" {
		os.RemoveAll(b.work)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flowbench:", err)
		os.Exit(1)
	}
}

func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func nowMs() int64 { return time.Now().UnixMilli() }

func human(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprint(n)
	}
}

func (b *bench) build() error {
	benchDir, err := benchutil.FindModule("github.com/moonmq/moonmq/stoatflow/bench", "flowbench")
	if err != nil {
		return err
	}
	repo := filepath.Dir(filepath.Dir(benchDir))
	if benchutil.ModulePath(filepath.Join(repo, "go.mod")) != "github.com/moonmq/moonmq" {
		return fmt.Errorf("%s is not the moonmq repository", repo)
	}
	bin := filepath.Join(b.work, "bin")
	os.MkdirAll(bin, 0o755)
	b.bins.moonmq = b.opt.moonmq
	if b.bins.moonmq == "" {
		progressf("[build] moonmq (go build ./cmd/moonmq in %s)", repo)
		b.bins.moonmq = filepath.Join(bin, "moonmq")
		if err := benchutil.Run(repo, "go", "build", "-o", b.bins.moonmq, "./cmd/moonmq"); err != nil {
			return err
		}
	}
	b.bins.flowapp = b.opt.flowapp
	if b.bins.flowapp == "" {
		progressf("[build] flowapp")
		b.bins.flowapp = filepath.Join(bin, "flowapp")
		if err := benchutil.Run(benchDir, "go", "build", "-o", b.bins.flowapp, "./cmd/flowapp"); err != nil {
			return err
		}
	}
	b.bins.gokaapp = filepath.Join(bin, "gokaapp")
	if !b.opt.skip["goka"] {
		progressf("[build] gokaapp")
		if err := benchutil.Run(benchDir, "go", "build", "-o", b.bins.gokaapp, "./cmd/gokaapp"); err != nil {
			return err
		}
	}
	if !b.opt.skip["kstreams"] {
		ks := filepath.Join(benchDir, "kstreams")
		cpFile := filepath.Join(ks, "target", "classpath.txt")
		class := filepath.Join(ks, "target", "classes", "io", "moonmq", "flowbench", "KsApp.class")
		if newer(class, filepath.Join(ks, "src"), filepath.Join(ks, "pom.xml")) || newer(cpFile, filepath.Join(ks, "pom.xml")) {
			progressf("[build] kstreams (mvn -q -B package in %s)", ks)
			if err := benchutil.Run(ks, "mvn", "-q", "-B", "package"); err != nil {
				return err
			}
		}
		cp, err := os.ReadFile(cpFile)
		if err != nil {
			return err
		}
		b.bins.ksClasspath = filepath.Join(ks, "target", "classes") + ":" + strings.TrimSpace(string(cp))
		if b.bins.java, err = exec.LookPath("java"); err != nil {
			return fmt.Errorf("java: %w (or --skip kstreams)", err)
		}
	}
	return nil
}

// makeVocab makes n distinct lower-case words of 3 to 10 letters.
func makeVocab(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		l := 3 + r.IntN(8)
		w := make([]byte, l)
		for i := range w {
			w[i] = byte('a' + r.IntN(26))
		}
		if s := string(w); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// lineGen makes lines of opt.wordsPerLine words drawn Zipf-like (s=1.1)
// from the vocabulary. It is sequential: call it with i = 0, 1, 2, ...
func (b *bench) lineGen(seed uint64) recordGen {
	r := rand.New(rand.NewPCG(seed, 7))
	z := rand.NewZipf(r, 1.1, 2, uint64(len(b.vocab)-1))
	var sb strings.Builder
	return func(int64) ([]byte, []byte, time.Time) {
		sb.Reset()
		for j := 0; j < b.opt.wordsPerLine; j++ {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(b.vocab[z.Uint64()])
		}
		return nil, []byte(sb.String()), time.Now()
	}
}

func (b *bench) run() error {
	var err error
	b.runID = "fb" + time.Now().Format("150405")
	if b.opt.results == "" {
		dir, err := benchutil.FindModule("github.com/moonmq/moonmq/stoatflow/bench", "flowbench")
		if err != nil {
			return err
		}
		b.opt.results = filepath.Join(dir, "results", time.Now().Format("20060102-150405"))
	}
	b.results = b.opt.results
	if err := os.MkdirAll(filepath.Join(b.results, "logs"), 0o755); err != nil {
		return err
	}
	if b.work, err = os.MkdirTemp("", "flowbench-"); err != nil {
		return err
	}
	progressf("flowbench: results in %s, work in %s", b.results, b.work)
	if err := b.build(); err != nil {
		return err
	}
	if b.br, err = startBroker(b.bins.moonmq, b.work); err != nil {
		return err
	}
	b.br.p.logPath = filepath.Join(b.work, "moonmq.log")
	progressf("[broker] moonmq serving on %s (data %s)", b.br.addr, b.br.dataDir)
	if b.cl, b.adm, err = newAdmin(b.br.addr); err != nil {
		return err
	}
	defer b.cl.Close()
	b.vocab = makeVocab(b.opt.vocab)
	ctx := context.Background()
	rep := &report{opt: b.opt, started: b.started}

	// withCache adds StoatFlow with its table cache (the word count's
	// counts are its only table).
	frameworks := func(withGoka bool, guarantee string, withCache bool) []string {
		var out []string
		out = append(out, fwStoatFlow)
		if withCache && !b.opt.skip["cache"] {
			out = append(out, fwStoatFlowCache)
		}
		if !b.opt.skip["kstreams"] {
			out = append(out, fwKStreams)
		}
		if withGoka && guarantee == "alo" && !b.opt.skip["goka"] {
			out = append(out, fwGoka)
		}
		return out
	}
	guarantees := []string{}
	for _, g := range []string{"eos", "alo"} {
		if !b.opt.skip[g] {
			guarantees = append(guarantees, g)
		}
	}
	save := func() {
		rep.write(b.results)
	}

	// Word count.
	if !b.opt.skip["wordcount"] {
		input := b.runID + "-wc-input"
		if err := createTopic(ctx, b.adm, input, b.opt.partitions); err != nil {
			return err
		}
		if err := preload(ctx, b.br.addr, input, b.opt.partitions, b.opt.lines, b.lineGen(1), "wordcount"); err != nil {
			return err
		}
		words := b.opt.lines * int64(b.opt.wordsPerLine)
		for _, g := range guarantees {
			for _, fw := range frameworks(true, g, true) {
				o := appOpts{profile: b.opt.profile && fw == fwStoatFlow && g == "eos"}
				r := b.throughput("wordcount", fw, g, input, b.opt.lines, words, o)
				if r.Profile != "" {
					rep.profileTop = pprofTop(b.bins.flowapp, r.Profile, false, 35)
					rep.profileCum = pprofTop(b.bins.flowapp, r.Profile, true, 45)
					os.WriteFile(filepath.Join(b.results, "profile-top.txt"), []byte(rep.profileTop), 0o644)
					os.WriteFile(filepath.Join(b.results, "profile-cum.txt"), []byte(rep.profileCum), 0o644)
					os.Link(b.bins.flowapp, filepath.Join(b.results, "flowapp.bin"))
				}
				rep.throughput = append(rep.throughput, r)
				save()
				time.Sleep(2 * time.Second)
			}
		}
		if !b.opt.skip["latency"] {
			for _, g := range guarantees {
				rate := b.opt.pacedRate
				if rate == 0 {
					low := 0.0
					for _, r := range rep.throughput {
						if r.Workload == "wordcount" && r.Guarantee == g && r.Err == "" {
							s := r.Steady
							if s == 0 {
								s = r.Rate
							}
							if low == 0 || s < low {
								low = s
							}
						}
					}
					rate = float64(int64(low*b.opt.pacedFraction/100) * 100)
				}
				if rate <= 0 {
					progressf("[latency %s] no throughput measured: skipped", g)
					continue
				}
				for _, fw := range frameworks(true, g, false) {
					rep.latency = append(rep.latency, b.latency(fw, g, rate))
					save()
					time.Sleep(2 * time.Second)
				}
			}
		}
	}

	// Windowed count.
	if !b.opt.skip["windowed"] {
		input := b.runID + "-win-input"
		if err := createTopic(ctx, b.adm, input, b.opt.partitions); err != nil {
			return err
		}
		base := time.Now().Add(-b.opt.windowSpan).UnixMilli()
		n := b.opt.windowRecords
		r := rand.New(rand.NewPCG(3, 4))
		val := make([]byte, 16)
		gen := func(i int64) ([]byte, []byte, time.Time) {
			k := fmt.Appendf(nil, "key-%05d", r.IntN(b.opt.windowKeys))
			return k, val, time.UnixMilli(base + i*b.opt.windowSpan.Milliseconds()/n)
		}
		if err := preloadKeyed(ctx, b.br.addr, input, n, gen, "windowed"); err != nil {
			return err
		}
		for _, g := range guarantees {
			for _, fw := range frameworks(false, g, false) {
				rep.throughput = append(rep.throughput, b.throughput("windowed", fw, g, input, n, n, appOpts{}))
				save()
				time.Sleep(2 * time.Second)
			}
		}
	}

	// Restore.
	if !b.opt.skip["restore"] {
		input := b.runID + "-restore-input"
		if err := createTopic(ctx, b.adm, input, b.opt.partitions); err != nil {
			return err
		}
		pool := make([]byte, 4<<20)
		rr := rand.New(rand.NewPCG(5, 6))
		for i := range pool {
			pool[i] = byte(rr.Uint32())
		}
		vs := b.opt.restoreValue
		gen := func(i int64) ([]byte, []byte, time.Time) {
			off := (i * 7919) % int64(len(pool)-vs)
			return fmt.Appendf(nil, "k%07d", i), pool[off : off+int64(vs)], time.Now()
		}
		n := b.opt.restoreKeys
		if err := preload(ctx, b.br.addr, input, b.opt.partitions, n, gen, "restore"); err != nil {
			return err
		}
		k0, _, _ := gen(0)
		bytes := n * int64(len(k0)+vs)
		fws := []string{fwStoatFlow}
		if !b.opt.skip["kstreams"] {
			fws = append(fws, fwKStreams)
		}
		for _, fw := range fws {
			rep.restore = append(rep.restore, b.restore(fw, input, n, bytes))
			save()
			time.Sleep(2 * time.Second)
		}
	}
	rep.finished = time.Now()
	save()
	fmt.Println(rep.markdown())
	progressf("flowbench: done in %v; results in %s", time.Since(b.started).Round(time.Second), b.results)
	return nil
}

// preloadKeyed is preload with Kafka's default (murmur2) key partitioning,
// so that the input is partitioned by key as a groupByKey needs.
func preloadKeyed(ctx context.Context, addr, topic string, n int64, gen recordGen, label string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(200000),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	last := time.Now()
	errc := make(chan error, 1)
	for i := int64(0); i < n; i++ {
		k, v, ts := gen(i)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: k, Value: v, Timestamp: ts}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
		if time.Since(last) >= time.Second {
			last = time.Now()
			progressf("[preload %s] %s/%s records", label, human(i), human(n))
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("preload %s: %w", topic, err)
	default:
	}
	progressf("[preload %s] %s records in %.1fs", label, human(n), time.Since(start).Seconds())
	return nil
}

func writeJSON(path string, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	os.WriteFile(path, b, 0o644)
}
