package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/moonmq/moonmq/stoatflow"
)

type report struct {
	opt        options
	started    time.Time
	finished   time.Time
	throughput []tpResult
	latency    []latResult
	restore    []restoreResult
	profileTop string
	profileCum string
}

func (r *report) tp(workload, fw, g string) *tpResult {
	for i := range r.throughput {
		t := &r.throughput[i]
		if t.Workload == workload && t.Framework == fw && t.Guarantee == g && t.Err == "" {
			return t
		}
	}
	return nil
}

func (r *report) lat(fw, g string) *latResult {
	for i := range r.latency {
		l := &r.latency[i]
		if l.Framework == fw && l.Guarantee == g && l.Err == "" && l.Samples > 0 {
			return l
		}
	}
	return nil
}

func (r *report) rs(fw string) *restoreResult {
	for i := range r.restore {
		if r.restore[i].Framework == fw && r.restore[i].Err == "" {
			return &r.restore[i]
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func verdict(a, b, target float64) string {
	if a <= 0 || b <= 0 {
		return "not measured"
	}
	if a/b >= target {
		return "**met**"
	}
	return "**not met**"
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d cores (%s), load average %s at the end", runtime.NumCPU(), model, load)
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("# flowbench %s", r.started.Format("2006-01-02 15:04"))
	w("")
	w("Machine: %s. One single-node MoonMQ; %d partitions per topic; wordcount %s lines × %d words (vocabulary %d, Zipf s=1.1); windowed %s records over %d keys, %v tumbling windows (StoatFlow: %s); restore %s keys × %d B. StoatFlow threads: %s; table-cache runs: state.cache-max-keys %d.",
		machine(), r.opt.partitions, human(r.opt.lines), r.opt.wordsPerLine, r.opt.vocab, human(r.opt.windowRecords), r.opt.windowKeys, r.opt.window, map[string]string{"dsl": "DSL WindowedBy/AggregateWindows", "processor": "Processor API + key-value store"}[r.opt.windowImpl], human(r.opt.restoreKeys), r.opt.restoreValue, threadsText(r.opt.threads), r.opt.cacheKeys)
	if !r.finished.IsZero() {
		w("Run took %v.", r.finished.Sub(r.started).Round(time.Second))
	}
	w("")
	w("## Ratios")
	w("")
	w("| comparison | StoatFlow | peer | ratio (end-to-end) | ratio (steady) | target |")
	w("| --- | --- | --- | --- | --- | --- |")
	pairOf := func(title, workload, g, fw, peer string, target float64) {
		a, p := r.tp(workload, fw, g), r.tp(workload, peer, g)
		if a == nil || p == nil {
			w("| %s | %s | %s | n/a | n/a | %s |", title, rateOf(a), rateOf(p), targetText(target))
			return
		}
		t := targetText(target)
		if target > 0 {
			t += " " + verdict(a.Rate, p.Rate, target)
		}
		w("| %s | %s rec/s | %s rec/s | %s | %s | %s |", title, human(int64(a.Rate)), human(int64(p.Rate)), ratio(a.Rate, p.Rate), ratio(a.Steady, p.Steady), t)
	}
	pair := func(title, workload, g, peer string, target float64) {
		pairOf(title, workload, g, fwStoatFlow, peer, target)
	}
	pair("wordcount EOS throughput, StoatFlow / Kafka Streams", "wordcount", "eos", fwKStreams, 1.5)
	if r.tp("wordcount", fwStoatFlowCache, "eos") != nil {
		// Both forward the latest count per word per commit.
		pairOf("wordcount EOS throughput, StoatFlow with the table cache / Kafka Streams (its cache on by default)", "wordcount", "eos", fwStoatFlowCache, fwKStreams, 1.5)
		pairOf("wordcount ALO throughput, StoatFlow with the table cache / Kafka Streams", "wordcount", "alo", fwStoatFlowCache, fwKStreams, 0)
	}
	pair("wordcount ALO throughput, StoatFlow / Kafka Streams", "wordcount", "alo", fwKStreams, 0)
	pair("wordcount ALO throughput, StoatFlow / goka", "wordcount", "alo", fwGoka, 2)
	pair("windowed EOS throughput, StoatFlow / Kafka Streams", "windowed", "eos", fwKStreams, 0)
	pair("windowed ALO throughput, StoatFlow / Kafka Streams", "windowed", "alo", fwKStreams, 0)
	if a, p := r.rs(fwStoatFlow), r.rs(fwKStreams); a != nil && p != nil {
		w("| restore rate (launch to ready), StoatFlow / Kafka Streams | %.0f MB/s | %.0f MB/s | %s | %s (restore alone) | ≥ 1.5x %s |",
			a.MBps, p.MBps, ratio(a.MBps, p.MBps), ratio(p.RestoreOnly, a.RestoreOnly), verdict(a.MBps, p.MBps, 1.5))
	}
	for _, g := range []string{"eos", "alo"} {
		for _, peer := range []string{fwKStreams, fwGoka} {
			a, p := r.lat(fwStoatFlow, g), r.lat(peer, g)
			if a == nil || p == nil {
				continue
			}
			w("| wordcount %s p99 latency, %s / StoatFlow (higher: StoatFlow faster) | %.0f ms | %.0f ms | %s | (p50 %s) | — |",
				strings.ToUpper(g), fwTitle[peer], a.P99, p.P99, ratio(p.P99, a.P99), ratio(p.P50, a.P50))
		}
	}
	w("")
	w("End-to-end: input records / (time from the first input record the app read to the moment its committed positions cover the whole input and its internal topics). Steady: input records/s while the counting step went from 10%% to 90%% of its expected count (independent of the commit interval).")
	w("")
	w("## Throughput")
	w("")
	w("| case | records | seconds | end-to-end rec/s | steady rec/s | startup s | app CPU s | broker CPU s | app CPU µs/record | output records |")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, t := range r.throughput {
		if t.Err != "" {
			w("| %s | %s | failed: %s | | | | | | | |", t.name(), human(t.Records), oneLine(t.Err))
			continue
		}
		w("| %s | %s | %.1f | %s | %s | %.1f | %.1f | %.1f | %.1f | %s |", t.name(), human(t.Records), t.Seconds, human(int64(t.Rate)), human(int64(t.Steady)), t.Startup, t.AppCPU, t.BrokerCPU, 1e6*t.AppCPU/float64(t.Records), human(t.Output))
	}
	if len(r.latency) > 0 {
		w("")
		w("## Latency (wordcount, paced)")
		w("")
		w("From the produce timestamp of an input line to the moment a read_committed consumer receives an output record it caused (every output record whose input came after the warm-up).")
		w("")
		w("| case | paced lines/s | achieved | output records | p50 ms | p99 ms | p99.9 ms | max ms | app CPU s |")
		w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, l := range r.latency {
			name := fwTitle[l.Framework] + " " + strings.ToUpper(l.Guarantee)
			if l.Err != "" && l.Samples == 0 {
				w("| %s | %s | failed: %s | | | | | | |", name, human(int64(l.Rate)), oneLine(l.Err))
				continue
			}
			w("| %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |", name, human(int64(l.Rate)), human(int64(l.Achieved)), human(int64(l.Samples)), l.P50, l.P99, l.P999, l.Max, l.AppCPU)
		}
	}
	if len(r.restore) > 0 {
		w("")
		w("## Restore")
		w("")
		w("| framework | records | changelog MB | fill s (rec/s) | local state MB | launch → ready s | restore alone s | MB/s | rec/s | app CPU s |")
		w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, x := range r.restore {
			if x.Err != "" {
				w("| %s | %s | failed: %s | | | | | | | |", fwTitle[x.Framework], human(x.Records), oneLine(x.Err))
				continue
			}
			w("| %s | %s | %.0f | %.1f (%s) | %.0f | %.1f | %.1f | %.0f | %s | %.1f |", fwTitle[x.Framework], human(x.Records), float64(x.Bytes)/1e6,
				x.FillSeconds, human(int64(x.FillRate)), x.StateMB, x.Seconds, x.RestoreOnly, x.MBps, human(int64(x.Rate)), x.AppCPU)
		}
	}
	if r.profileTop != "" {
		w("")
		w("## StoatFlow CPU profile (wordcount EOS run)")
		w("")
		w("```")
		w("%s", strings.TrimSpace(r.profileTop))
		w("```")
	}
	return b.String()
}

func rateOf(t *tpResult) string {
	if t == nil {
		return "n/a"
	}
	return human(int64(t.Rate)) + " rec/s"
}

func targetText(t float64) string {
	if t <= 0 {
		return "—"
	}
	return fmt.Sprintf("≥ %.1fx", t)
}

func oneLine(s string) string {
	s = strings.SplitN(s, "\n", 2)[0]
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

func (r *report) write(dir string) {
	os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644)
	writeJSON(filepath.Join(dir, "results.json"), map[string]any{
		"started": r.started, "throughput": r.throughput, "latency": r.latency, "restore": r.restore,
	})
}

func threadsText(n int) string {
	if n <= 0 {
		return fmt.Sprintf("the default (%d)", stoatflow.Defaults().Threads)
	}
	return strconv.Itoa(n)
}
