// Command habench measures how long StoatFlow's hot standby
// (ha.mode active-standby) takes to fail over, in one run on one
// single-node MoonMQ broker it starts itself, and compares it with Kafka
// Streams 4.3.1 with a standby replica:
//
//   - StoatFlow: two pods of examples/wordcount (one active, one standby),
//     a feeder producing lines to "words" all the time, for each heartbeat
//     (staleness-misses 3): kill -9 of the active, the killed pod started
//     again and waited for until READY_STANDBY before the next; then
//     POST /ha/switch to the active. With the vocabulary's state (small)
//     and, after a preload of many distinct words, a larger one.
//   - Kafka Streams (../kstreams-ha, Maven): the same word count,
//     num.standby.replicas=1, exactly_once_v2, two instances; kill -9 of
//     the instance with the most active count tasks, with the default
//     session.timeout.ms and with the broker's minimum.
//
// A read_committed consumer of the output topic runs throughout; every
// output record carries its input's timestamp, set by the feeder when it
// made the line, so "first output whose input was produced after the
// kill" is the first output of the new active. Results go to
// results/habench-<timestamp>/ (results.md, results.json, logs).
//
//	cd stoatflow/bench && go run ./cmd/habench                  # full run, about 20 min
//	go run ./cmd/habench --docs ../../docs/BENCHMARKS.md          # and rewrite the docs section's tables
//	go run ./cmd/habench --kills 3 --switches 3 --skip large,kstreams   # a quick look, 2 min
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
	wordcount     string
	docs          string
	partitions    int
	rate          int
	wordsPerLine  int
	vocab         int
	misses        int
	heartbeats    []time.Duration
	kills         int
	switches      int
	largeFor      time.Duration
	largeMax      int64
	largeWordLen  int
	largeHB       []time.Duration
	largeKills    int
	largeSwitches int
	ksDefaultKill int
	ksMinKills    int
	ksMinSession  time.Duration
	ksMinHB       time.Duration
	seed          uint64
	skip          map[string]bool
	keep          bool
	args          string
}

type bench struct {
	opt     options
	work    string
	results string
	logs    string
	br      *broker
	cl      *kgo.Client
	adm     *kadm.Client
	out     *watcher
	vocab   []string
	bins    struct{ moonmq, wordcount, java, ksClasspath string }
	res     results
	started time.Time
}

type results struct {
	Started    string      `json:"started"`
	Command    string      `json:"command"`
	Rate       int         `json:"rate_lines_per_s"`
	WordsLine  int         `json:"words_per_line"`
	Vocab      int         `json:"vocabulary"`
	Partitions int         `json:"partitions"`
	Sets       []setResult `json:"stoatflow"`
	KS         []ksSet     `json:"kstreams"`
	KSErr      string      `json:"kstreams_error,omitempty"`
	Notes      []string    `json:"notes"`
	LoadAvg    []string    `json:"load_average"`
	WallS      float64     `json:"wall_s"`
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func main() {
	var o options
	var skip, hbs, largeHBs string
	flag.StringVar(&o.results, "results", "", "results directory (default results/habench-<timestamp>)")
	flag.StringVar(&o.moonmq, "moonmq", os.Getenv("MOONMQ_BINARY"), "prebuilt moonmq binary (default: go build ./cmd/moonmq of the repository to /tmp/habench-moonmq)")
	flag.StringVar(&o.wordcount, "wordcount", "", "prebuilt examples/wordcount binary (default: go build it from ../ to /tmp/habench-wordcount)")
	flag.StringVar(&o.docs, "docs", "", "rewrite the generated part of the \"StoatFlow hot standby failover\" section of this file (docs/BENCHMARKS.md)")
	flag.IntVar(&o.partitions, "partitions", 3, "partitions of words, word-counts (and the Kafka Streams topics)")
	flag.IntVar(&o.rate, "rate", 2000, "feeder: lines per second, all the time")
	flag.IntVar(&o.wordsPerLine, "words", 5, "feeder: words per line")
	flag.IntVar(&o.vocab, "vocab", 100000, "distinct words of the vocabulary (preloaded, then what the feeder draws from)")
	flag.IntVar(&o.misses, "misses", 3, "STOATFLOW__HA__STALENESS_MISSES")
	flag.StringVar(&hbs, "heartbeats", "500ms,100ms", "STOATFLOW__HA__HEARTBEAT_MS values, small state")
	flag.IntVar(&o.kills, "kills", 20, "kill -9 of the active per heartbeat, small state")
	flag.IntVar(&o.switches, "switches", 20, "POST /ha/switch per heartbeat, small state")
	flag.DurationVar(&o.largeFor, "large-for", 4*time.Minute, "large state: how long to preload distinct words (0: no large-state part)")
	flag.Int64Var(&o.largeMax, "large-words", 50_000_000, "large state: at most this many distinct words")
	flag.IntVar(&o.largeWordLen, "large-word-bytes", 32, "large state: characters per distinct word (at least 32; longer reaches a large store with fewer records)")
	flag.StringVar(&largeHBs, "large-heartbeats", "100ms", "heartbeats measured with the large state")
	flag.IntVar(&o.largeKills, "large-kills", 20, "kills per heartbeat, large state")
	flag.IntVar(&o.largeSwitches, "large-switches", 20, "switches per heartbeat, large state")
	flag.IntVar(&o.ksDefaultKill, "ks-default-kills", 3, "Kafka Streams kills with the default session.timeout.ms (45 s)")
	flag.IntVar(&o.ksMinKills, "ks-min-kills", 5, "Kafka Streams kills with --ks-min-session")
	flag.DurationVar(&o.ksMinSession, "ks-min-session", 6*time.Second, "the smallest session timeout the broker accepts (MoonMQ: 6 s, as Kafka's group.min.session.timeout.ms)")
	flag.DurationVar(&o.ksMinHB, "ks-min-heartbeat", 2*time.Second, "heartbeat.interval.ms with --ks-min-session (Kafka's advice: a third of the session timeout)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the vocabulary, the feeder and the waits before each fault")
	flag.StringVar(&skip, "skip", "", "comma-separated parts to skip: stoatflow, large, kstreams, ks-default, ks-min, kills, switches")
	flag.BoolVar(&o.keep, "keep", false, "keep the broker's data and the pods' state (temporary directory)")
	flag.Parse()
	var err error
	if o.heartbeats, err = durations(hbs); err != nil {
		fmt.Fprintln(os.Stderr, "habench: --heartbeats:", err)
		os.Exit(2)
	}
	if o.largeWordLen < 32 {
		fmt.Fprintln(os.Stderr, "habench: --large-word-bytes must be at least 32")
		os.Exit(2)
	}
	if o.largeHB, err = durations(largeHBs); err != nil {
		fmt.Fprintln(os.Stderr, "habench: --large-heartbeats:", err)
		os.Exit(2)
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.skip[s] = true
		}
	}
	o.args = strings.Join(os.Args[1:], " ")
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
	err = b.run()
	killAll()
	if !o.keep && b.work != "" {
		os.RemoveAll(b.work)
	} else if b.work != "" {
		progressf("kept %s", b.work)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "habench:", err)
		os.Exit(1)
	}
}

func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func human(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprint(n)
	}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func (b *bench) build() error {
	benchDir, err := benchutil.FindModule("github.com/moonmq/moonmq/stoatflow/bench", "habench")
	if err != nil {
		return err
	}
	flowDir := filepath.Dir(benchDir)
	repo := filepath.Dir(flowDir)
	if benchutil.ModulePath(filepath.Join(repo, "go.mod")) != "github.com/moonmq/moonmq" {
		return fmt.Errorf("%s is not the moonmq repository", repo)
	}
	b.bins.moonmq = b.opt.moonmq
	if b.bins.moonmq == "" {
		b.bins.moonmq = "/tmp/habench-moonmq"
		progressf("[build] go build -o %s ./cmd/moonmq (in %s)", b.bins.moonmq, repo)
		if err := benchutil.Run(repo, "go", "build", "-o", b.bins.moonmq, "./cmd/moonmq"); err != nil {
			return err
		}
	}
	b.bins.wordcount = b.opt.wordcount
	if b.bins.wordcount == "" {
		b.bins.wordcount = "/tmp/habench-wordcount"
		progressf("[build] go build -o %s ./examples/wordcount (in %s)", b.bins.wordcount, flowDir)
		if err := benchutil.Run(flowDir, "go", "build", "-o", b.bins.wordcount, "./examples/wordcount"); err != nil {
			return err
		}
	}
	if !b.opt.skip["kstreams"] {
		ks := filepath.Join(benchDir, "kstreams-ha")
		progressf("[build] mvn -q -B package (in %s)", ks)
		if err := benchutil.Run(ks, "mvn", "-q", "-B", "package"); err != nil {
			return err
		}
		cp, err := os.ReadFile(filepath.Join(ks, "target", "classpath.txt"))
		if err != nil {
			return err
		}
		b.bins.ksClasspath = filepath.Join(ks, "target", "classes") + ":" + strings.TrimSpace(string(cp))
		if b.bins.java, err = exec.LookPath("java"); err != nil {
			return fmt.Errorf("kstreams needs java on PATH (or --skip kstreams): %w", err)
		}
	}
	return nil
}

func (b *bench) run() error {
	b.res.Started = b.started.Format(time.RFC3339)
	b.res.Command = strings.TrimSpace("go run ./cmd/habench " + b.opt.args)
	b.res.Rate, b.res.WordsLine, b.res.Vocab, b.res.Partitions = b.opt.rate, b.opt.wordsPerLine, b.opt.vocab, b.opt.partitions
	b.res.LoadAvg = append(b.res.LoadAvg, "start "+loadAvg())
	if err := b.build(); err != nil {
		return err
	}
	var err error
	if b.work, err = os.MkdirTemp("", "habench-"); err != nil {
		return err
	}
	b.results = b.opt.results
	if b.results == "" {
		b.results = filepath.Join("results", "habench-"+b.started.Format("20060102-150405"))
	}
	b.logs = filepath.Join(b.results, "logs")
	if err := os.MkdirAll(b.logs, 0o755); err != nil {
		return err
	}
	progressf("[broker] starting moonmq (work directory %s)", b.work)
	if b.br, err = startBroker(b.bins.moonmq, b.work, b.logs); err != nil {
		return err
	}
	if b.cl, b.adm, err = func() (*kgo.Client, *kadm.Client, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.br.addr))
		if err != nil {
			return nil, nil, err
		}
		return cl, kadm.NewClient(cl), nil
	}(); err != nil {
		return err
	}
	defer b.cl.Close()
	b.vocab = vocabulary(b.opt.vocab, b.opt.seed)

	var runErr error
	if !b.opt.skip["stoatflow"] {
		runErr = b.runStoat()
	}
	if runErr != nil {
		b.res.Notes = append(b.res.Notes, "StoatFlow phase stopped: "+runErr.Error())
	}
	b.res.LoadAvg = append(b.res.LoadAvg, "after StoatFlow "+loadAvg())
	if !b.opt.skip["kstreams"] {
		if err := b.runKS(); err != nil {
			b.res.KSErr = err.Error()
			progressf("[kstreams] %v", err)
		}
		b.res.LoadAvg = append(b.res.LoadAvg, "after Kafka Streams "+loadAvg())
	}
	b.res.WallS = time.Since(b.started).Seconds()
	return b.report()
}

func (b *bench) runStoat() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, t := range []string{"words", "word-counts"} {
		if err := createTopic(ctx, b.adm, t, b.opt.partitions); err != nil {
			return err
		}
	}
	var err error
	if b.out, err = startWatcher(b.br.addr, "word-counts", b.opt.partitions); err != nil {
		return err
	}
	defer b.out.Close()
	s, err := b.newStoat()
	if err != nil {
		return err
	}
	defer func() {
		s.stopAll()
		s.review()
	}()
	progressf("[stoatflow] preloading the vocabulary (%s distinct words)", human(int64(len(b.vocab))))
	if err := s.preloadVocab("words"); err != nil {
		return err
	}
	var f *feeder
	defer func() {
		if f != nil {
			f.Stop()
		}
	}()
	kills, switches := b.opt.kills, b.opt.switches
	if b.opt.skip["kills"] {
		kills = 0
	}
	if b.opt.skip["switches"] {
		switches = 0
	}
	for _, hb := range b.opt.heartbeats {
		s.hb = hb
		progressf("[stoatflow] starting 2 pods, heartbeat %v, %d misses", hb, b.opt.misses)
		var between func() error
		if f == nil {
			// The first boot: the feeder starts once the active has
			// counted the vocabulary, so the first measurement has the
			// whole state.
			between = func() error {
				if err := waitConsumed(b.adm, s.app, "words", 0, 2*time.Minute, "vocabulary"); err != nil {
					return err
				}
				var err error
				f, err = startFeeder(b.br.addr, "words", b.vocab, b.opt.rate, b.opt.wordsPerLine, b.opt.seed)
				return err
			}
		}
		if err := s.boot(between); err != nil {
			return err
		}
		r := s.measure("small", int64(len(b.vocab)), b.vocabBytes(), kills, switches)
		b.res.Sets = append(b.res.Sets, r)
		if r.Err != "" {
			return fmt.Errorf("small state, heartbeat %v: %s", hb, r.Err)
		}
	}
	if b.opt.largeFor <= 0 || b.opt.skip["large"] {
		return nil
	}
	if len(b.opt.largeHB) > 0 && s.hb != b.opt.largeHB[0] {
		s.hb = b.opt.largeHB[0]
		if err := s.boot(nil); err != nil {
			return err
		}
	}
	progressf("[stoatflow] preloading distinct words for %v (heartbeat %v)", b.opt.largeFor, s.hb)
	n, err := s.preloadLarge(b.opt.largeFor, b.opt.largeMax)
	if err != nil {
		return err
	}
	words := n + int64(len(b.vocab))
	for _, hb := range b.opt.largeHB {
		if hb != s.hb {
			s.hb = hb
			if err := s.boot(nil); err != nil {
				return err
			}
		}
		r := s.measure("large", words, b.vocabBytes()+n*int64(b.opt.largeWordLen+8), b.opt.largeKills, b.opt.largeSwitches)
		b.res.Sets = append(b.res.Sets, r)
		if r.Err != "" {
			return fmt.Errorf("large state, heartbeat %v: %s", hb, r.Err)
		}
	}
	return nil
}

// vocabBytes is the vocabulary's words plus an 8-byte count each: what
// the store holds, before any engine overhead or compression.
func (b *bench) vocabBytes() int64 {
	var n int64
	for _, w := range b.vocab {
		n += int64(len(w)) + 8
	}
	return n
}

func (b *bench) runKS() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, t := range []string{"ks-words", "ks-word-counts"} {
		if err := createTopic(ctx, b.adm, t, b.opt.partitions); err != nil {
			return err
		}
	}
	out, err := startWatcher(b.br.addr, "ks-word-counts", b.opt.partitions)
	if err != nil {
		return err
	}
	defer out.Close()
	r := &ksRun{b: b, app: "habench-ks", out: out, rng: newRand(b.opt.seed, 21)}
	for i := range 2 {
		r.insts = append(r.insts, &ksInst{id: fmt.Sprintf("ks-%d", i), dir: filepath.Join(b.work, "ks-state", fmt.Sprintf("ks-%d", i))})
	}
	defer r.stopAll()
	progressf("[kstreams] preloading the vocabulary into ks-words")
	s := &stoat{b: b, rng: newRand(b.opt.seed, 22)}
	if err := s.preloadVocab("ks-words"); err != nil {
		return err
	}
	f, err := startFeeder(b.br.addr, "ks-words", b.vocab, b.opt.rate, b.opt.wordsPerLine, b.opt.seed+1)
	if err != nil {
		return err
	}
	defer f.Stop()
	if !b.opt.skip["ks-default"] && b.opt.ksDefaultKill > 0 {
		progressf("[kstreams] 2 instances, default session.timeout.ms (45 s)")
		set := r.measure("default", 0, 0, b.opt.ksDefaultKill)
		b.res.KS = append(b.res.KS, set)
	}
	if !b.opt.skip["ks-min"] && b.opt.ksMinKills > 0 {
		progressf("[kstreams] 2 instances, session.timeout.ms %v, heartbeat.interval.ms %v", b.opt.ksMinSession, b.opt.ksMinHB)
		set := r.measure("minimum", b.opt.ksMinSession, b.opt.ksMinHB, b.opt.ksMinKills)
		b.res.KS = append(b.res.KS, set)
	}
	return nil
}

func (b *bench) report() error {
	md := b.markdown()
	fmt.Println(md)
	if err := os.WriteFile(filepath.Join(b.results, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(b.res, "", "  ")
	if err := os.WriteFile(filepath.Join(b.results, "results.json"), js, 0o644); err != nil {
		return err
	}
	progressf("results in %s", b.results)
	if b.opt.docs != "" {
		if err := updateDocs(b.opt.docs, md); err != nil {
			return err
		}
		progressf("updated %s", b.opt.docs)
	}
	return nil
}
