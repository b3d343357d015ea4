// Command benchcompare compares benchmark reports written by `moonmq bench
// --json` and natsbench --json. The first report is the subject (MoonMQ);
// every further report is a peer. For each case of the subject it prints the
// subject's numbers next to each peer's and the subject/peer throughput
// ratios, then checks the product targets:
//
//   - pipelined acks=-1 produce throughput ≥ --min-ratio × each peer's
//     (--ratio-modes selects other modes; the ratio of a mode not selected
//     is printed as information for peers that have a target);
//   - one-at-a-time acks=-1 produce p50 below --max-p50 (0 = no target);
//   - consume throughput ≥ --min-consume × produce throughput (pipelined;
//     0 = no target);
//   - the broker processes' CPU seconds per million acknowledged records
//     ≤ --max-cpu-ratio × each named peer's, and their peak resident
//     memory ≤ --max-rss-ratio × the peer's (pipelined acks=-1 cases, when
//     the reports carry the usage `moonmq bench --broker-pids` measures).
//
// bench/replication.sh makes the 3-replica MoonMQ the subject and the
// single node and NATS JetStream R3 its peers, so the ratios printed are
// R3/R1 and MoonMQ R3/NATS R3.
//
// A peer without the subject's exact acks level (NATS JetStream has only
// one) is compared through its acks=-1 case of the same partitions and mode;
// such ratios are marked with '*'.
//
// A report argument may join several runs of one target with '+'
// (a.json+b.json): bench/run.sh runs MoonMQ and Kafka twice, in opposite
// orders, so that the machine's drift (the host's page and write caches
// fill as a run goes on) falls on both. The joined report has each case's
// records and seconds summed, so its throughput is the rounds' overall
// rate, its latency percentiles the rounds' mean, CPU per record the
// rounds' overall, and peak memory the highest.
//
// Usage: benchcompare [--out FILE] subject.json peer.json...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/moonmq/moonmq/internal/bench"
)

func main() {
	out := flag.String("out", "", "also write the comparison to this file")
	minRatio := flag.String("min-ratio", "kfake=1,nats-jetstream=1.5", "target subject/peer ratio of acks=-1 produce throughput in --ratio-modes, per peer name")
	maxP50 := flag.Float64("max-p50", 1, "target one-at-a-time acks=-1 produce p50 in ms; 0 = none")
	minConsume := flag.Float64("min-consume", 3, "target consume/produce throughput ratio (pipelined cases); 0 = none")
	ratioModes := flag.String("ratio-modes", "pipelined", "comma-separated modes whose --min-ratio is a target")
	flag.BoolVar(&anyMode, "any-mode", false, "match a peer's case by acks and partitions alone, whatever its mode (transactional against pipelined)")
	maxCPU := flag.String("max-cpu-ratio", "", "target subject/peer ratio of broker CPU seconds per million records (pipelined acks=-1), per peer name, e.g. kafka=0.5")
	maxRSS := flag.String("max-rss-ratio", "", "target subject/peer ratio of broker peak resident memory while producing (pipelined acks=-1), per peer name, e.g. kafka=0.2")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: benchcompare [flags] subject.json peer.json...\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var reports []*bench.Report
	for _, path := range flag.Args() {
		r, err := load(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchcompare: %v\n", err)
			os.Exit(1)
		}
		reports = append(reports, r)
	}
	tg := targets{maxP50: *maxP50, minConsume: *minConsume, ratioModes: map[string]bool{}}
	var err error
	for _, r := range []struct {
		flag string
		into *map[string]float64
	}{{*minRatio, &tg.minRatio}, {*maxCPU, &tg.maxCPU}, {*maxRSS, &tg.maxRSS}} {
		if *r.into, err = parseRatios(r.flag); err != nil {
			fmt.Fprintf(os.Stderr, "benchcompare: %v\n", err)
			os.Exit(2)
		}
	}
	for _, m := range strings.Split(*ratioModes, ",") {
		tg.ratioModes[strings.TrimSpace(m)] = true
	}
	var sb strings.Builder
	compare(&sb, reports[0], reports[1:], tg)
	fmt.Print(sb.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "benchcompare: %v\n", err)
			os.Exit(1)
		}
	}
}

// load reads one report, or joins the rounds of a '+'-joined path.
func load(path string) (*bench.Report, error) {
	var rounds []*bench.Report
	for _, p := range strings.Split(path, "+") {
		r, err := loadOne(p)
		if err != nil {
			return nil, err
		}
		rounds = append(rounds, r)
	}
	return joinRounds(rounds), nil
}

func loadOne(path string) (*bench.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r bench.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Version != bench.ReportVersion {
		return nil, fmt.Errorf("%s: report version %d, want %d", path, r.Version, bench.ReportVersion)
	}
	return &r, nil
}

func parseRatios(s string) (map[string]float64, error) {
	m := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("invalid ratio %q: want peer=number", kv)
		}
		m[k] = f
	}
	return m, nil
}

// anyMode makes match ignore the mode (--any-mode).
var anyMode bool

// match finds the peer's result for the subject's case: the same acks,
// partitions and mode, else the same partitions and mode at acks=-1.
// With anyMode the first case of the same acks and partitions matches.
func match(peer *bench.Report, c bench.CaseResult) (r *bench.CaseResult, exact bool) {
	for i := range peer.Results {
		p := &peer.Results[i]
		if anyMode && p.Acks == c.Acks && p.Partitions == c.Partitions {
			return p, true
		}
		if p.Acks == c.Acks && p.Partitions == c.Partitions && p.Mode == c.Mode {
			return p, true
		}
	}
	for i := range peer.Results {
		p := &peer.Results[i]
		if p.Acks == -1 && p.Partitions == c.Partitions && p.Mode == c.Mode {
			return p, false
		}
	}
	return nil, false
}

// ratio formats a/b, or "-" when either is missing.
func ratio(a, b float64, exact bool) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	s := fmt.Sprintf("%.2fx", a/b)
	if !exact {
		s += "*"
	}
	return s
}

func krate(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v < 1e3:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1fk", v/1e3)
}

// targets are the ratios and bounds a comparison checks.
type targets struct {
	minRatio   map[string]float64 // peer -> subject/peer produce throughput, at least
	ratioModes map[string]bool    // modes whose minRatio is a target
	maxP50     float64            // one-at-a-time p50 ms, below (0: none)
	minConsume float64            // consume/produce, at least (0: none)
	maxCPU     map[string]float64 // peer -> subject/peer CPU per record, at most
	maxRSS     map[string]float64 // peer -> subject/peer peak RSS, at most
}

func compare(w io.Writer, subj *bench.Report, peers []*bench.Report, tg targets) {
	minRatio, ratioModes, maxP50, minConsume := tg.minRatio, tg.ratioModes, tg.maxP50, tg.minConsume
	fmt.Fprintf(w, "Comparison: %s vs %s\n", subj.Target, names(peers))
	fmt.Fprintf(w, "%d-byte records; produce rec/s (p50/p99/p999 ms); ratios are %s produce throughput / peer's.\n", subj.RecordSize, subj.Target)
	fmt.Fprintln(w, "'*' = peer has no such acks level; compared with its acks=-1 case.")
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"case", subj.Target + " prod", "p50/p99/p999"}
	for _, p := range peers {
		hdr = append(hdr, p.Target+" prod", "p50/p99/p999", subj.Target+"/"+p.Target)
	}
	hdr = append(hdr, subj.Target+" cons", "cons/prod")
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, c := range subj.Results {
		row := []string{c.Case, krate(c.Produce.RecordsPerSec), fmt.Sprintf("%.3f/%.3f/%.3f", c.Produce.P50Ms, c.Produce.P99Ms, c.Produce.P999Ms)}
		for _, p := range peers {
			pr, exact := match(p, c)
			if pr == nil {
				row = append(row, "-", "-", "-")
				continue
			}
			row = append(row, krate(pr.Produce.RecordsPerSec), fmt.Sprintf("%.3f/%.3f/%.3f", pr.Produce.P50Ms, pr.Produce.P99Ms, pr.Produce.P999Ms),
				ratio(c.Produce.RecordsPerSec, pr.Produce.RecordsPerSec, exact))
		}
		row = append(row, krate(c.Consume.RecordsPerSec), ratio(c.Consume.RecordsPerSec, c.Produce.RecordsPerSec, true))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Consume rec/s per target:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\t"+subj.Target+"\t"+strings.ReplaceAll(names(peers), ", ", "\t")+"\t")
	for _, c := range subj.Results {
		row := []string{c.Case, krate(c.Consume.RecordsPerSec)}
		for _, p := range peers {
			if pr, _ := match(p, c); pr != nil {
				row = append(row, krate(pr.Consume.RecordsPerSec))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()

	footprint(w, subj, peers)
	endToEndLatency(w, subj, peers)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets:")
	pass, total := 0, 0
	check := func(ok bool, format string, args ...any) {
		total++
		mark := "FAIL"
		if ok {
			pass++
			mark = "ok  "
		}
		fmt.Fprintf(w, "  [%s] %s\n", mark, fmt.Sprintf(format, args...))
	}
	for _, c := range subj.Results {
		if c.Error != "" {
			check(false, "%s ran without error (%s)", c.Case, c.Error)
		}
		if c.Acks != -1 {
			continue
		}
		for _, p := range peers {
			want, ok := minRatio[p.Target]
			if !ok {
				continue
			}
			pr, _ := match(p, c)
			if pr == nil || pr.Produce.RecordsPerSec <= 0 {
				continue
			}
			got := c.Produce.RecordsPerSec / pr.Produce.RecordsPerSec
			if ratioModes[c.Mode] {
				check(got >= want, "%s: %s/%s produce %.2fx (target ≥ %.2gx)", c.Case, subj.Target, p.Target, got, want)
			} else {
				fmt.Fprintf(w, "  [info] %s: %s/%s produce %.2fx (no target for this mode)\n", c.Case, subj.Target, p.Target, got)
			}
		}
		if c.Mode == string(bench.ModePipelined) && c.Broker != nil {
			for _, p := range peers {
				pr, _ := match(p, c)
				if pr == nil || pr.Broker == nil {
					continue
				}
				if want, ok := tg.maxCPU[p.Target]; ok && pr.Broker.CPUSecondsPerMillion > 0 {
					got := c.Broker.CPUSecondsPerMillion / pr.Broker.CPUSecondsPerMillion
					check(got <= want, "%s: %s/%s broker CPU per record %.2fx (target ≤ %.2gx)", c.Case, subj.Target, p.Target, got, want)
				}
				if want, ok := tg.maxRSS[p.Target]; ok && pr.Broker.RSSPeakMB > 0 {
					got := c.Broker.RSSPeakMB / pr.Broker.RSSPeakMB
					check(got <= want, "%s: %s/%s broker peak memory %.2fx (target ≤ %.2gx)", c.Case, subj.Target, p.Target, got, want)
				}
			}
		}
		switch c.Mode {
		case string(bench.ModePipelined):
			if minConsume > 0 && c.Produce.RecordsPerSec > 0 {
				got := c.Consume.RecordsPerSec / c.Produce.RecordsPerSec
				check(got >= minConsume, "%s: consume/produce %.2fx (target ≥ %.2gx)", c.Case, got, minConsume)
			}
		case string(bench.ModeOneAtATime):
			if maxP50 > 0 {
				check(c.Produce.P50Ms > 0 && c.Produce.P50Ms < maxP50, "%s: produce p50 %.3f ms (target < %.3g ms)", c.Case, c.Produce.P50Ms, maxP50)
			}
		}
	}
	fmt.Fprintf(w, "%d of %d targets met.\n", pass, total)
	for _, r := range append([]*bench.Report{subj}, peers...) {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "note (%s): %s\n", r.Target, n)
		}
	}
}

func names(rs []*bench.Report) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Target)
	}
	return strings.Join(s, ", ")
}

// footprint prints the broker processes' CPU per record and memory next to
// each peer's, for the reports that measured them.
func footprint(w io.Writer, subj *bench.Report, peers []*bench.Report) {
	measured := false
	for _, c := range subj.Results {
		measured = measured || c.Broker != nil
	}
	if !measured {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Broker processes while producing: CPU seconds per million acknowledged records; peak resident MB (all processes of a group):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"case", subj.Target + " cpu", subj.Target + " rss"}
	for _, p := range peers {
		hdr = append(hdr, p.Target+" cpu", "ratio", p.Target+" rss", "ratio")
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, c := range subj.Results {
		u := c.Broker
		if u == nil {
			continue
		}
		row := []string{c.Case, fmt.Sprintf("%.2f", u.CPUSecondsPerMillion), fmt.Sprintf("%.0f", u.RSSPeakMB)}
		for _, p := range peers {
			pr, exact := match(p, c)
			if pr == nil || pr.Broker == nil {
				row = append(row, "-", "-", "-", "-")
				continue
			}
			pu := pr.Broker
			row = append(row, fmt.Sprintf("%.2f", pu.CPUSecondsPerMillion), ratio(u.CPUSecondsPerMillion, pu.CPUSecondsPerMillion, exact),
				fmt.Sprintf("%.0f", pu.RSSPeakMB), ratio(u.RSSPeakMB, pu.RSSPeakMB, exact))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

// endToEndLatency prints the end-to-end cases' latency (Produce call to
// consumer) next to each peer's.
func endToEndLatency(w io.Writer, subj *bench.Report, peers []*bench.Report) {
	var cases []bench.CaseResult
	for _, c := range subj.Results {
		if c.Mode == string(bench.ModeEndToEnd) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "End-to-end latency at a fixed rate, produce call to consumer, p50/p99/p999 ms:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"case", subj.Target}
	for _, p := range peers {
		hdr = append(hdr, p.Target, "p50 "+subj.Target+"/"+p.Target)
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	lat := func(c *bench.CaseResult) string {
		return fmt.Sprintf("%.2f/%.2f/%.2f", c.Consume.E2EP50Ms, c.Consume.E2EP99Ms, c.Consume.E2EP999Ms)
	}
	for i := range cases {
		c := &cases[i]
		row := []string{c.Case, lat(c)}
		for _, p := range peers {
			pr, exact := match(p, *c)
			if pr == nil || pr.Consume.E2EP50Ms <= 0 {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, lat(pr), ratio(c.Consume.E2EP50Ms, pr.Consume.E2EP50Ms, exact))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}
