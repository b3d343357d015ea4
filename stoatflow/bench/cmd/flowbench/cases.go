package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

// tpResult is one throughput case: N preloaded input records, from the
// first input record the app read to the moment its committed positions
// cover the whole input (and every internal topic it reads).
type tpResult struct {
	Workload  string  `json:"workload"`
	Framework string  `json:"framework"`
	Guarantee string  `json:"guarantee"`
	Records   int64   `json:"records"`
	Seconds   float64 `json:"seconds"`        // first input record read -> all committed
	Rate      float64 `json:"rate"`           // Records / Seconds
	Steady    float64 `json:"steady_rate"`    // input rec/s between 10% and 90% counted
	Startup   float64 `json:"startup_s"`      // launch -> first input record read
	Output    int64   `json:"output_offsets"` // end offsets of the output topic (records, plus transaction markers under EOS)
	AppCPU    float64 `json:"app_cpu_s"`      // during Seconds
	BrokerCPU float64 `json:"broker_cpu_s"`
	Profile   string  `json:"profile,omitempty"`
	Err       string  `json:"error,omitempty"`
}

func (r tpResult) name() string {
	return r.Workload + " " + fwTitle[r.Framework] + " " + strings.ToUpper(r.Guarantee)
}

// throughput runs one throughput case on a preloaded input. expect is how
// many times the app's counting step runs for the whole input (words for
// the word count).
func (b *bench) throughput(mode, framework, guarantee, input string, n, expect int64, o appOpts) (res tpResult) {
	res = tpResult{Workload: mode, Framework: framework, Guarantee: guarantee, Records: n}
	id := fmt.Sprintf("%s-%s-%s-%s", b.runID, mode, framework, guarantee)
	label := fmt.Sprintf("%s %s %s", mode, framework, guarantee)
	output := id + "-out"
	ctx := context.Background()
	if mode != "fill" {
		if err := createTopic(ctx, b.adm, output, b.opt.partitions); err != nil {
			res.Err = err.Error()
			return res
		}
	}
	a, err := b.startApp(framework, guarantee, mode, id, input, output, o)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() {
		if !a.p.Stop(60 * time.Second) {
			progressf("[%s] did not stop within 60s; killed", label)
		}
		res.Profile = a.profile
	}()
	others := internalTopics(framework, mode, id)
	slack := int64(0)
	if guarantee == "eos" {
		slack = 1
	}
	var first sample
	var cpu0, bcpu0 float64
	start := time.Now()
	lastLog := time.Now()
	lastChange, lastSeen := time.Now(), int64(-1)
	for {
		time.Sleep(100 * time.Millisecond)
		if a.p.Exited() {
			res.Err = fmt.Sprintf("%s exited: %v\n%s", id, a.p.err, a.p.tail(15))
			return res
		}
		if first.src == 0 {
			if s, ok := a.p.firstProgress(); ok {
				first = s
				cpu0, bcpu0 = benchutil.CPUSeconds(a.p.pid()), benchutil.CPUSeconds(b.br.p.pid())
				res.Startup = float64(first.ms-a.launched) / 1000
			}
		}
		c := covered(ctx, b.adm, id, input, others, slack)
		if c.done && first.src > 0 {
			done := nowMs()
			if mode != "fill" {
				if ends, err := b.adm.ListEndOffsets(ctx, output); err == nil {
					ends.Each(func(o kadm.ListedOffset) { res.Output += max(o.Offset, 0) })
				}
			}
			res.AppCPU = benchutil.CPUSeconds(a.p.pid()) - cpu0
			res.BrokerCPU = benchutil.CPUSeconds(b.br.p.pid()) - bcpu0
			res.Seconds = float64(done-first.ms) / 1000
			res.Rate = float64(n) / res.Seconds
			t10, t90 := a.p.crossing(expect/10), a.p.crossing(expect*9/10)
			if t10 > 0 && t90 > t10 {
				res.Steady = 0.8 * float64(n) / (float64(t90-t10) / 1000)
			}
			progressf("[%s] done: %s records in %.1fs = %s rec/s (steady %s rec/s), app CPU %.1fs, broker CPU %.1fs",
				label, human(n), res.Seconds, human(int64(res.Rate)), human(int64(res.Steady)), res.AppCPU, res.BrokerCPU)
			return res
		}
		cnt := a.p.lastProgress().n
		if cnt+c.committed != lastSeen {
			lastSeen, lastChange = cnt+c.committed, time.Now()
		}
		if time.Since(lastLog) >= time.Second {
			lastLog = time.Now()
			progressf("[%s] counted %s/%s, committed %s/%s input records (%s) %.0fs", label, human(cnt), human(expect), human(c.committed), human(n), c.why, time.Since(start).Seconds())
		}
		if time.Since(lastChange) > b.opt.stall || time.Since(start) > b.opt.caseTimeout {
			res.Err = fmt.Sprintf("no progress for %v (counted %d, committed %d of %d: %s)\n%s", time.Since(lastChange).Round(time.Second), cnt, c.committed, n, c.why, a.p.tail(15))
			return res
		}
	}
}

// latResult is one paced word-count run.
type latResult struct {
	Framework string  `json:"framework"`
	Guarantee string  `json:"guarantee"`
	Rate      float64 `json:"rate"`     // target input rec/s
	Produced  int64   `json:"produced"` // input records
	Achieved  float64 `json:"achieved_rate"`
	Samples   int     `json:"samples"` // output records measured
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	P999      float64 `json:"p999_ms"`
	Max       float64 `json:"max_ms"`
	AppCPU    float64 `json:"app_cpu_s"`
	Err       string  `json:"error,omitempty"`
}

// latency produces lines at rate for warmup+duration into a fresh topic
// while the app runs, and measures, for every output record whose input
// was produced after the warm-up, the time from the input's produce
// timestamp to the moment a read_committed consumer received it.
func (b *bench) latency(framework, guarantee string, rate float64) (res latResult) {
	res = latResult{Framework: framework, Guarantee: guarantee, Rate: rate}
	id := fmt.Sprintf("%s-paced-%s-%s", b.runID, framework, guarantee)
	label := fmt.Sprintf("latency %s %s @ %s lines/s", framework, guarantee, human(int64(rate)))
	input, output := id+"-in", id+"-out"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, t := range []string{input, output} {
		if err := createTopic(ctx, b.adm, t, b.opt.partitions); err != nil {
			res.Err = err.Error()
			return res
		}
	}
	a, err := b.startApp(framework, guarantee, "wordcount", id, input, output, appOpts{tsHeaders: true})
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer a.p.Stop(60 * time.Second)
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, ok := a.p.ready(); ok {
			break
		}
		if a.p.Exited() || time.Now().After(deadline) {
			res.Err = fmt.Sprintf("%s not ready: %v\n%s", id, a.p.err, a.p.tail(15))
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}

	measureFrom := time.Now().Add(b.opt.pacedWarmup)
	var mu sync.Mutex
	var lats []float64 // ms
	var lastRecv time.Time
	var seen int64
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.br.addr), kgo.ConsumeTopics(output),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer cons.Close()
	go func() {
		for {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			recv := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				seen++
				src := r.Timestamp
				for _, h := range r.Headers {
					if h.Key == "ts" && len(h.Value) == 8 {
						src = time.UnixMilli(int64(binary.BigEndian.Uint64(h.Value)))
					}
				}
				if src.Before(measureFrom) {
					return
				}
				lats = append(lats, float64(recv.Sub(src).Microseconds())/1000)
			})
			if fs.NumRecords() > 0 {
				lastRecv = recv
			}
			mu.Unlock()
		}
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(b.br.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer prod.Close()
	gen := b.lineGen(99)
	total := b.opt.pacedWarmup + b.opt.pacedDuration
	pstart := time.Now()
	var sent int64
	tick := time.NewTicker(2 * time.Millisecond)
	lastLog := time.Now()
	cpu0 := benchutil.CPUSeconds(a.p.pid())
	for now := range tick.C {
		el := now.Sub(pstart)
		if el >= total {
			break
		}
		due := int64(rate * el.Seconds())
		for ; sent < due; sent++ {
			_, v, _ := gen(sent)
			prod.Produce(ctx, &kgo.Record{Topic: input, Partition: int32(sent % int64(b.opt.partitions)), Value: v, Timestamp: time.Now()}, nil)
		}
		if time.Since(lastLog) >= time.Second {
			lastLog = time.Now()
			mu.Lock()
			nl := len(lats)
			mu.Unlock()
			progressf("[%s] produced %s lines, %s output records measured, %.0fs/%.0fs", label, human(sent), human(int64(nl)), el.Seconds(), total.Seconds())
		}
	}
	tick.Stop()
	prod.Flush(ctx)
	res.Produced = sent
	res.Achieved = float64(sent) / time.Since(pstart).Seconds()
	// Everything produced is processed once the committed positions cover
	// it; then the consumer drains what is left.
	slack := int64(0)
	if guarantee == "eos" {
		slack = 1
	}
	deadline = time.Now().Add(120 * time.Second)
	for {
		c := covered(ctx, b.adm, id, input, internalTopics(framework, "wordcount", id), slack)
		if c.done {
			break
		}
		if time.Now().After(deadline) || a.p.Exited() {
			res.Err = "paced input not covered within 120s: " + c.why
			break
		}
		progressf("[%s] waiting for the app to commit the paced input (%s)", label, c.why)
		time.Sleep(time.Second)
	}
	res.AppCPU = benchutil.CPUSeconds(a.p.pid()) - cpu0
	for i := 0; i < 100; i++ {
		mu.Lock()
		idle := !lastRecv.IsZero() && time.Since(lastRecv) > 1500*time.Millisecond
		mu.Unlock()
		if idle {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lats)
	res.Samples = len(lats)
	if len(lats) > 0 {
		q := func(p float64) float64 { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
		res.P50, res.P99, res.P999, res.Max = q(0.50), q(0.99), q(0.999), lats[len(lats)-1]
	}
	progressf("[%s] %s output records measured: p50 %.1f ms, p99 %.1f ms, max %.1f ms", label, human(int64(res.Samples)), res.P50, res.P99, res.Max)
	return res
}

// restoreResult is one restore case: a store filled through the app from
// N records, its local state deleted, the app restarted.
type restoreResult struct {
	Framework   string  `json:"framework"`
	Records     int64   `json:"records"`
	Bytes       int64   `json:"bytes"` // key + value bytes in the changelog
	FillSeconds float64 `json:"fill_s"`
	FillRate    float64 `json:"fill_rate"`
	StateMB     float64 `json:"state_dir_mb"`
	Seconds     float64 `json:"seconds"`      // launch -> ready
	RestoreOnly float64 `json:"restore_only"` // the app's own restore timing
	Restored    int64   `json:"restored"`     // records the app says it restored
	MBps        float64 `json:"mb_per_s"`
	Rate        float64 `json:"rate"`
	AppCPU      float64 `json:"app_cpu_s"`
	Err         string  `json:"error,omitempty"`
}

var (
	sfRestoredRe = regexp.MustCompile(`"msg":"stores restored".*?"records":(\d+),"took":"([^"]+)"`)
)

func (b *bench) restore(framework, input string, n, bytes int64) (res restoreResult) {
	res = restoreResult{Framework: framework, Records: n, Bytes: bytes}
	id := fmt.Sprintf("%s-restore-%s", b.runID, framework)
	label := "restore " + framework
	stateDir := filepath.Join(b.work, "state", id)

	fill := b.throughput("fill", framework, "eos", input, n, n, appOpts{stateDir: stateDir, logSuffix: "-fill"})
	if fill.Err != "" {
		res.Err = "fill: " + fill.Err
		return res
	}
	res.FillSeconds, res.FillRate = fill.Seconds, fill.Rate
	res.StateMB = float64(dirSize(stateDir)) / 1e6
	progressf("[%s] filled %s records (%.0f MB local state); deleting %s", label, human(n), res.StateMB, stateDir)
	if err := os.RemoveAll(stateDir); err != nil {
		res.Err = err.Error()
		return res
	}
	time.Sleep(2 * time.Second)
	a, err := b.startApp(framework, "eos", "fill", fmt.Sprintf("%s-fill-%s-eos", b.runID, framework), input, "", appOpts{stateDir: stateDir, logSuffix: "-restore", profile: b.opt.profile && framework == fwStoatFlow})
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() {
		a.p.Stop(60 * time.Second)
		if a.profile != "" {
			top := pprofTop(b.bins.flowapp, a.profile, false, 30) + "\n" + pprofTop(b.bins.flowapp, a.profile, true, 40)
			os.WriteFile(filepath.Join(b.results, "profile-restore.txt"), []byte(top), 0o644)
		}
	}()
	start := time.Now()
	lastLog := time.Now()
	for {
		if ms, ok := a.p.ready(); ok {
			res.Seconds = float64(ms-a.launched) / 1000
			break
		}
		if a.p.Exited() || time.Since(start) > b.opt.caseTimeout {
			res.Err = fmt.Sprintf("not ready after %v: %v\n%s", time.Since(start).Round(time.Second), a.p.err, a.p.tail(15))
			return res
		}
		if time.Since(lastLog) >= time.Second {
			lastLog = time.Now()
			extra := ""
			if a.httpAddr != "" {
				extra = sfRestoreProgress(a.httpAddr)
			}
			progressf("[%s] restoring %.0fs %s", label, time.Since(start).Seconds(), extra)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.AppCPU = benchutil.CPUSeconds(a.p.pid())
	switch framework {
	case fwStoatFlow:
		// The readiness endpoint must agree with the READY line.
		if resp, err := http.Get("http://" + a.httpAddr + "/health/ready"); err == nil {
			if resp.StatusCode != 200 {
				res.Err = "READY printed but /health/ready answered " + resp.Status
			}
			resp.Body.Close()
		}
		time.Sleep(200 * time.Millisecond)
		if m := sfRestoredRe.FindStringSubmatch(a.p.logText()); m != nil {
			res.Restored, _ = strconv.ParseInt(m[1], 10, 64)
			if d, err := time.ParseDuration(m[2]); err == nil {
				res.RestoreOnly = d.Seconds()
			}
		}
	case fwKStreams:
		var first, last int64
		for _, l := range a.p.specialLines() {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			ms, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "RESTORE_START" && first == 0 {
				first = ms
			}
			if f[0] == "RESTORE_END" {
				last = ms
				if len(f) >= 3 {
					res.Restored, _ = strconv.ParseInt(f[2], 10, 64)
				}
			}
		}
		if first > 0 && last >= first {
			res.RestoreOnly = float64(last-first) / 1000
		}
	}
	res.MBps = float64(bytes) / 1e6 / res.Seconds
	res.Rate = float64(n) / res.Seconds
	progressf("[%s] ready %.1fs after launch (restore itself %.1fs, %s records): %.0f MB/s, %s rec/s", label, res.Seconds, res.RestoreOnly, human(res.Restored), res.MBps, human(int64(res.Rate)))
	return res
}

func sfRestoreProgress(addr string) string {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + addr + "/health/ready")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body struct {
		Done  int64 `json:"restoredRecords"`
		Total int64 `json:"restoreTotal"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return ""
	}
	return fmt.Sprintf("(%s of %s changelog records)", human(body.Done), human(body.Total))
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// pprofTop runs `go tool pprof -top` on a profile.
func pprofTop(bin, prof string, cum bool, n int) string {
	args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", n)}
	if cum {
		args = append(args, "-cum")
	}
	args = append(args, bin, prof)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
