package main

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// kindColor gives each fault kind its colour in the timeline.
var kindColor = map[Kind]string{
	KillActive: "#d62728", KillStandby: "#ff9896", PauseActive: "#ff7f0e", Switch: "#2ca02c",
	Restart: "#1f77b4", KillBrokerLeader: "#9467bd", CrashPoint: "#8c564b",
}

func jsonPath(report string) string {
	return strings.TrimSuffix(report, filepath.Ext(report)) + ".json"
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// summaryJSON is the JSON written beside the report.
type summaryJSON struct {
	Summary      string       `json:"summary"`
	Verdict      string       `json:"verdict"`
	OK           bool         `json:"ok"`
	Seed         uint64       `json:"seed"`
	Duration     string       `json:"duration"`
	Pods         int          `json:"pods"`
	Replicas     int          `json:"replicas"`
	Kinds        []Kind       `json:"faultKinds"`
	Replay       string       `json:"replay"`
	Started      string       `json:"started"`
	TookS        float64      `json:"tookSeconds"`
	PhaseS       float64      `json:"faultPhaseSeconds"`
	Interrupted  bool         `json:"interrupted"`
	Acked        int          `json:"linesAcked"`
	FailedLines  int          `json:"linesFailed"`
	FaultsByKind map[Kind]int `json:"faultsByKind"`
	Takeover     struct {
		Count    int     `json:"count"`
		MedianMs float64 `json:"medianMs"`
		P99Ms    float64 `json:"p99Ms"`
		MaxMs    float64 `json:"maxMs"`
	} `json:"takeover"`
	Faults    []faultJSON `json:"faults"`
	Checks    []checkJSON `json:"checks"`
	Anomalies []string    `json:"anomalies"`
	Harness   []string    `json:"harness"`
	Notes     []string    `json:"notes,omitempty"`
	RunDir    string      `json:"runDir,omitempty"`
}

type faultJSON struct {
	N          int     `json:"n"`
	AtS        float64 `json:"atSeconds"`
	Kind       Kind    `json:"kind"`
	Target     string  `json:"target"`
	From       string  `json:"from"`
	To         string  `json:"to"`
	TakeoverMs float64 `json:"takeoverMs"`
	Takeover   bool    `json:"takeover"`
	Detail     string  `json:"detail"`
	Step       string  `json:"step"`
	Anomaly    string  `json:"anomaly,omitempty"`
}

type checkJSON struct {
	AfterFault int      `json:"afterFault"`
	AtS        float64  `json:"atSeconds"`
	Final      bool     `json:"final"`
	Lines      int      `json:"lines"`
	Words      int      `json:"words"`
	Updates    int      `json:"updates"`
	Changelog  int      `json:"changelogRecords"`
	Active     string   `json:"active"`
	CatchUpMs  float64  `json:"catchUpMs"`
	TookMs     float64  `json:"tookMs"`
	OK         bool     `json:"ok"`
	Problems   []string `json:"problems,omitempty"`
	Anomaly    string   `json:"anomaly,omitempty"`
}

func (r *Result) jsonSummary() summaryJSON {
	c := r.Config
	s := summaryJSON{Summary: r.Summary(), Verdict: r.Verdict(), OK: r.OK(), Seed: c.Seed, Duration: c.Duration.String(),
		Pods: c.Pods, Replicas: c.Replicas, Kinds: c.Faults, Replay: c.Replay(), Started: r.Started.Format(time.RFC3339),
		TookS: r.Took.Seconds(), PhaseS: r.FaultPhase.Seconds(), Interrupted: r.Interrupted, Acked: r.Acked, FailedLines: r.Failed,
		FaultsByKind: map[Kind]int{}, Anomalies: r.Anomalies, Harness: r.Harness, Notes: r.Notes}
	if !r.OK() {
		s.RunDir = r.RunDir
	}
	n, med, p99, worst := takeoverStats(r.Faults)
	s.Takeover.Count, s.Takeover.MedianMs, s.Takeover.P99Ms, s.Takeover.MaxMs = n, ms(med), ms(p99), ms(worst)
	for _, f := range r.Faults {
		s.FaultsByKind[f.Kind]++
		s.Faults = append(s.Faults, faultJSON{N: f.N, AtS: f.At.Seconds(), Kind: f.Kind, Target: f.Target, From: f.From, To: f.To,
			TakeoverMs: ms(f.Took), Takeover: f.Takeover, Detail: f.Detail, Step: f.Step, Anomaly: f.Anomaly})
	}
	for _, k := range r.Checks {
		s.Checks = append(s.Checks, checkJSON{AfterFault: k.AfterFault, AtS: k.At.Seconds(), Final: k.Final, Lines: k.Lines,
			Words: k.Report.Words, Updates: k.Report.Updates, Changelog: k.Report.Changelog, Active: k.Active,
			CatchUpMs: ms(k.CatchUp), TookMs: ms(k.Took), OK: k.Anomaly == "" && k.Report.OK(), Problems: k.Report.Problems, Anomaly: k.Anomaly})
	}
	return s
}

// writeReport writes the HTML report to path and the JSON summary beside
// it.
func writeReport(r *Result, path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, []byte(renderHTML(r)), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r.jsonSummary(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath(path), append(b, '\n'), 0o644)
}

func esc(s string) string { return html.EscapeString(s) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// renderHTML is the report: one self-contained page, no scripts, the
// timeline as inline SVG.
func renderHTML(r *Result) string {
	var b strings.Builder
	c := r.Config
	color := "#2a7d2a"
	if !r.OK() {
		color = "#c00"
	}
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>stoatchaos seed %d: %s</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px;vertical-align:top}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;font-size:12px}h2{margin-top:1.6em}.k{display:inline-block;width:10px;height:10px;margin-right:4px}td.n{text-align:right}</style></head><body>
<h1>StoatFlow fault run, seed %d: <span style="color:%s">%s</span></h1>
<pre>%s</pre>
`, c.Seed, esc(r.Verdict()), c.Seed, color, esc(r.Verdict()), esc(r.Summary()))

	// Parameters.
	b.WriteString("<h2>Parameters</h2><table>")
	row := func(k, v string) { fmt.Fprintf(&b, "<tr><th>%s</th><td>%s</td></tr>", esc(k), esc(v)) }
	tier := "active-standby (ha.mode)"
	if c.Pods == 1 {
		tier = "single instance (with a spare state directory for the zombie fault)"
	}
	row("seed", fmt.Sprint(c.Seed))
	row("fault phase", fmt.Sprintf("%v planned, %v run", c.Duration, r.FaultPhase.Round(time.Second)))
	row("pods", fmt.Sprintf("%d, %s", c.Pods, tier))
	brokers := "1 MoonMQ node"
	if c.Replicas > 1 {
		brokers = fmt.Sprintf("%d MoonMQ replicas, failover mode (Raft)", c.Replicas)
	}
	row("brokers", brokers)
	row("faults", kindList(c.Faults))
	row("exactly-once check", fmt.Sprintf("every %d faults and at the end", c.CheckEvery))
	row("feeder", fmt.Sprintf("%d lines/s (%d acknowledged, %d failed batches' lines)", c.Rate, r.Acked, r.Failed))
	row("started", r.Started.Format(time.RFC3339))
	row("took", r.Took.Round(time.Second).String())
	row("replay", c.Replay())
	if !r.OK() || c.Keep {
		row("run directory", r.RunDir)
	}
	b.WriteString("</table>")

	// Takeovers.
	n, med, p99, worst := takeoverStats(r.Faults)
	b.WriteString("<h2>Takeover times</h2><p>From the fault (the kill, the SIGSTOP, the accepted switch, the SIGTERM, the crash) to exactly one pod saying it is the active (ACTIVE/ACTIVE in GET /ha/status; with one pod, /health/ready 200). Only faults that removed or replaced the active count as takeovers.</p>")
	fmt.Fprintf(&b, "<table><tr><th>takeovers</th><th>median</th><th>p99</th><th>max</th></tr><tr><td class=n>%d</td><td class=n>%s</td><td class=n>%s</td><td class=n>%s</td></tr></table>",
		n, secs(med), secs(p99), secs(worst))
	b.WriteString("<table><tr><th>kind</th><th>faults</th><th>takeovers</th><th>median</th><th>p99</th><th>max</th><th>anomalies</th></tr>")
	for _, k := range AllKinds {
		var fs []Fault
		bad := 0
		for _, f := range r.Faults {
			if f.Kind == k {
				fs = append(fs, f)
				if f.Anomaly != "" {
					bad++
				}
			}
		}
		if len(fs) == 0 {
			continue
		}
		kn, kmed, kp99, kmax := takeoverStats(fs)
		stats := "<td>-</td><td>-</td><td>-</td>"
		if kn > 0 {
			stats = fmt.Sprintf("<td class=n>%s</td><td class=n>%s</td><td class=n>%s</td>", secs(kmed), secs(kp99), secs(kmax))
		}
		fmt.Fprintf(&b, `<tr><td><span class="k" style="background:%s"></span>%s</td><td class=n>%d</td><td class=n>%d</td>%s<td class=n>%d</td></tr>`,
			kindColor[k], k, len(fs), kn, stats, bad)
	}
	b.WriteString("</table>")

	// Timeline.
	b.WriteString("<h2>Timeline</h2><p>One row per fault kind: each fault is a bar from its injection to the takeover (hover for details; red outline: an anomaly). The last row marks the exactly-once checks (green passed, red failed).</p>")
	b.WriteString(timeline(r))
	b.WriteString("<p>Takeover time of every fault against the time of the run (filled: a takeover; hollow: the active stayed in place).</p>")
	b.WriteString(takeoverPlot(r))

	// Checks.
	b.WriteString("<h2>Exactly-once checks</h2><p>The feeder paused; the active's store (GET /state/counts) waited for until it equals the word count of everything \"words\" holds; then, read_committed from the topics: each word's outputs on \"word-counts\" are exactly 1, 2, ..., n (n: how often the input holds it), no output names a word the input lacks, and a replay of the changelog equals the counts. The final check stops every pod (SIGTERM) before reading the topics.</p>")
	b.WriteString("<table><tr><th>after fault</th><th>at</th><th>active</th><th>lines</th><th>words</th><th>output updates</th><th>changelog records</th><th>store caught up in</th><th>check took</th><th>result</th></tr>")
	for _, k := range r.Checks {
		res := `<span style="color:#2a7d2a">exactly once</span>`
		if k.Anomaly != "" {
			res = `<span style="color:#c00">` + esc(k.Anomaly) + `</span>`
		}
		label := fmt.Sprint(k.AfterFault)
		if k.Final {
			label += " (final)"
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=n>%.0fs</td><td>%s</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%d</td><td class=n>%s</td><td class=n>%s</td><td>%s</td></tr>",
			label, k.At.Seconds(), esc(k.Active), k.Lines, k.Report.Words, k.Report.Updates, k.Report.Changelog, secs(k.CatchUp), secs(k.Took), res)
	}
	b.WriteString("</table>")

	// Anomalies.
	b.WriteString("<h2>Anomalies</h2>")
	if len(r.Anomalies) == 0 && len(r.Harness) == 0 {
		b.WriteString("<p>None.</p>")
	}
	for _, a := range r.Anomalies {
		fmt.Fprintf(&b, `<pre style="color:#c00">%s</pre>`, esc(a))
	}
	for _, h := range r.Harness {
		fmt.Fprintf(&b, `<p>The run itself failed:</p><pre style="color:#c60">%s</pre>`, esc(h))
	}
	if len(r.Notes) > 0 {
		b.WriteString("<h2>Notes</h2><p>What looked wrong without breaking a guarantee, with the pods' high-availability log lines.</p>")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, `<pre style="color:#c60">%s</pre>`, esc(n))
		}
	}

	// Every fault.
	b.WriteString("<h2>Faults</h2><table><tr><th>#</th><th>at</th><th>kind</th><th>target</th><th>active before</th><th>active after</th><th>takeover</th><th>detail</th></tr>")
	for _, f := range r.Faults {
		took := secs(f.Took)
		if !f.Takeover {
			took = "(" + took + ")"
		}
		detail := esc(f.Detail)
		if f.Anomaly != "" {
			detail += `<br><span style="color:#c00">` + esc(f.Anomaly) + `</span>`
		}
		fmt.Fprintf(&b, `<tr><td class=n>%d</td><td class=n>%.1fs</td><td><span class="k" style="background:%s"></span>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=n>%s</td><td>%s<br><small>%s</small></td></tr>`,
			f.N, f.At.Seconds(), kindColor[f.Kind], f.Kind, esc(f.Target), esc(f.From), esc(f.To), took, detail, esc(f.Step))
	}
	b.WriteString("</table><p>A takeover time in parentheses is the time to one active after a fault that left the active in place.</p>")

	if len(r.Logs) > 0 {
		b.WriteString("<h2>Log tails</h2>")
		keys := make([]string, 0, len(r.Logs))
		for k := range r.Logs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "<h3>%s</h3><pre>%s</pre>", esc(k), esc(r.Logs[k]))
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// timeline draws the faults on a time axis, one row per kind.
func timeline(r *Result) string {
	var kinds []Kind
	for _, k := range AllKinds {
		for _, f := range r.Faults {
			if f.Kind == k {
				kinds = append(kinds, k)
				break
			}
		}
	}
	end := r.FaultPhase
	for _, f := range r.Faults {
		end = max(end, f.At+f.Took)
	}
	for _, c := range r.Checks {
		end = max(end, c.At+c.Took)
	}
	tmax := math.Max(end.Seconds(), 1)
	const w, left, rowH = 1250.0, 140.0, 24.0
	rows := len(kinds) + 1
	h := 20 + rowH*float64(rows) + 30
	x := func(sec float64) float64 { return left + (w-left-10)*sec/tmax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	rowOf := map[Kind]int{}
	for i, k := range kinds {
		rowOf[k] = i
		y := 20 + rowH*float64(i)
		fmt.Fprintf(&b, `<text x="5" y="%.1f">%s</text><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, y+15, k, left, y+rowH, w-10, y+rowH)
	}
	for _, f := range r.Faults {
		y := 20 + rowH*float64(rowOf[f.Kind]) + 3
		x1, x2 := x(f.At.Seconds()), x((f.At + f.Took).Seconds())
		stroke := ""
		if f.Anomaly != "" {
			stroke = ` stroke="#c00" stroke-width="2"`
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.85"%s><title>#%d %s %s: %s -> %s in %s. %s</title></rect>`,
			x1, y, math.Max(x2-x1, 2), rowH-6, kindColor[f.Kind], stroke, f.N, f.Kind, f.Target, f.From, f.To, secs(f.Took), esc(f.Detail+" "+f.Anomaly))
	}
	cy := 20 + rowH*float64(len(kinds))
	fmt.Fprintf(&b, `<text x="5" y="%.1f">checks</text>`, cy+15)
	for _, c := range r.Checks {
		fill := "#2a7d2a"
		if c.Anomaly != "" {
			fill = "#c00"
		}
		x1, x2 := x(c.At.Seconds()), x((c.At + c.Took).Seconds())
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>check after fault %d: %d lines, %s</title></rect>`,
			x1, cy+3, math.Max(x2-x1, 2), rowH-6, fill, c.AfterFault, c.Lines, esc(c.Report.String()))
	}
	y := h - 24
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, left, y, w-10, y)
	step := niceStep(tmax / 10)
	for t := 0.0; t <= tmax; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`,
			x(t), y, x(t), y+4, x(t), y+16, t)
	}
	b.WriteString("</svg>")
	return b.String()
}

// takeoverPlot draws every fault's takeover time against its time in the
// run.
func takeoverPlot(r *Result) string {
	tmax := math.Max(r.FaultPhase.Seconds(), 1)
	ymax := 1.0
	for _, f := range r.Faults {
		tmax = math.Max(tmax, f.At.Seconds())
		ymax = math.Max(ymax, f.Took.Seconds())
	}
	ymax = niceStep(ymax/4) * 4
	if ymax < 1 {
		ymax = 1
	}
	const w, h, left, top, bottom = 1250.0, 240.0, 140.0, 10.0, 24.0
	x := func(sec float64) float64 { return left + (w-left-10)*sec/tmax }
	y := func(sec float64) float64 { return top + (h-top-bottom)*(1-sec/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	for v := 0.0; v <= ymax+1e-9; v += ymax / 4 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%gs</text>`,
			left, y(v), w-10, y(v), left-4, y(v)+4, v)
	}
	for _, f := range r.Faults {
		fill, stroke := kindColor[f.Kind], kindColor[f.Kind]
		if !f.Takeover {
			fill = "none"
		}
		if f.Anomaly != "" {
			stroke = "#c00"
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="1.5"><title>#%d %s %s: %s -> %s in %s</title></circle>`,
			x(f.At.Seconds()), y(math.Min(f.Took.Seconds(), ymax)), fill, stroke, f.N, f.Kind, esc(f.Target), esc(f.From), esc(f.To), secs(f.Took))
	}
	base := h - bottom
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, left, base, w-10, base)
	step := niceStep(tmax / 10)
	for t := 0.0; t <= tmax; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`,
			x(t), base, x(t), base+4, x(t), base+16, t)
	}
	b.WriteString("</svg>")
	return b.String()
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}
