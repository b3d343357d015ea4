package chaos

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/checker"
)

// kindColor gives each fault kind its colour in the plots.
var kindColor = map[Kind]string{
	Kill: "#d62728", PowerLoss: "#8c1c13", Pause: "#ff7f0e", IsolateLeader: "#9467bd",
	Partition: "#1f77b4", OneWay: "#17becf", Delay: "#bcbd22", Drop: "#7f7f7f",
	RollingRestart: "#2ca02c", KillAll: "#000000", RestartAll: "#98df8a", BitFlip: "#e377c2", Truncate: "#8c564b", CorruptElect: "#ff00ff", DamageRolled: "#f7b6d2",
	ClockStep: "#aec7e8", DiskFull: "#8c564b", DiskStall: "#c49c94", FsyncEIO: "#e377c2",
	MetaIsolate: "#393b79", GroupLinkCut: "#637939", "heal": "#c7c7c7",
}

var replicaColor = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"}

// bucket is one second of the run, for the throughput and latency plots.
type bucket struct {
	acked, unknown int
	lat            []float64 // milliseconds of acknowledged sends ending in it
}

func buckets(h checker.History, end time.Duration) []bucket {
	n := int(end/time.Second) + 1
	out := make([]bucket, n)
	for _, s := range h.Sends {
		i := int(time.Duration(s.End) / time.Second)
		if i < 0 || i >= n {
			continue
		}
		if s.Outcome == checker.Acked {
			out[i].acked++
			out[i].lat = append(out[i].lat, float64(s.End-s.Start)/1e6)
		} else {
			out[i].unknown++
		}
	}
	return out
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// plot is a simple SVG canvas with a time axis.
type plot struct {
	b            strings.Builder
	w, h         float64
	left, bottom float64
	tmax         float64 // seconds
}

func newPlot(w, h, tmax float64) *plot {
	p := &plot{w: w, h: h, left: 70, bottom: 24, tmax: math.Max(tmax, 1)}
	fmt.Fprintf(&p.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	return p
}

func (p *plot) x(sec float64) float64 { return p.left + (p.w-p.left-10)*sec/p.tmax }

func (p *plot) timeAxis() {
	y := p.h - p.bottom
	fmt.Fprintf(&p.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, p.left, y, p.w-10, y)
	step := niceStep(p.tmax / 10)
	for t := 0.0; t <= p.tmax; t += step {
		fmt.Fprintf(&p.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`,
			p.x(t), y, p.x(t), y+4, p.x(t), y+16, t)
	}
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

// shade draws every fault as a faint band behind a plot.
func (p *plot) shade(events []Event, top float64) {
	for _, e := range events {
		x1, x2 := p.x(e.Start.Seconds()), p.x(e.End.Seconds())
		fmt.Fprintf(&p.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.12"><title>%s</title></rect>`,
			x1, top, math.Max(x2-x1, 1), p.h-p.bottom-top, kindColor[e.Kind], html.EscapeString(e.String()))
	}
}

func (p *plot) String() string { return p.b.String() + "</svg>" }

// RenderHTML renders a run's report: a self-contained page with
// server-rendered SVG plots (no scripts).
func RenderHTML(r *Result) string {
	var b strings.Builder
	verdict := `<span style="color:#2a7d2a">no anomalies</span>`
	if !r.OK() {
		verdict = fmt.Sprintf(`<span style="color:#c00">%d anomalies, %d problems</span>`, total(r.Report.Counts), len(r.Problems))
	}
	end := r.Took
	for _, s := range r.samples {
		end = max(end, s.At)
	}
	for _, e := range r.Events {
		end = max(end, e.End)
	}
	if n := len(r.History.Sends); n > 0 {
		end = max(end, time.Duration(r.History.Sends[n-1].End))
	}
	tmax := end.Seconds()
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>MoonMQ chaos seed %d</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;font-size:12px}h2{margin-top:1.6em}.k{display:inline-block;width:10px;height:10px;margin-right:4px}</style></head><body>
<h1>MoonMQ chaos run, seed %d: %s</h1>
`, r.Config.Seed, r.Config.Seed, verdict)
	fmt.Fprintf(&b, "<pre>%s</pre>\n", html.EscapeString(r.summary(false)))

	// Faults by kind.
	b.WriteString("<h2>Faults</h2><table><tr><th>kind</th><th>count</th><th>total time</th></tr>")
	cnt, dur := map[Kind]int{}, map[Kind]time.Duration{}
	for _, e := range r.Events {
		cnt[e.Kind]++
		dur[e.Kind] += e.End - e.Start
	}
	for _, k := range append(everyKind(), "heal") {
		if cnt[k] > 0 {
			fmt.Fprintf(&b, `<tr><td><span class="k" style="background:%s"></span>%s</td><td>%d</td><td>%.1fs</td></tr>`, kindColor[k], k, cnt[k], dur[k].Seconds())
		}
	}
	b.WriteString("</table>")

	// Timeline: one row per replica with the faults that hit it, and a
	// row per group showing which replica served.
	groups := max(r.Config.Groups, 1)
	total := r.Config.Replicas * groups
	rows := total + groups
	rowH := 26.0
	tl := newPlot(1250, 30+rowH*float64(rows)+30, tmax)
	for i := 0; i < total; i++ {
		y := 20 + rowH*float64(i)
		fmt.Fprintf(&tl.b, `<text x="5" y="%.1f">replica %d</text><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, y+15, i+1, tl.left, y+rowH, tl.w-10, y+rowH)
	}
	for _, e := range r.Events {
		targets := e.Targets
		if len(targets) == 0 {
			for i := 1; i <= total; i++ {
				targets = append(targets, i)
			}
		}
		for _, id := range targets {
			y := 20 + rowH*float64(id-1) + 3
			x1, x2 := tl.x(e.Start.Seconds()), tl.x(e.End.Seconds())
			fmt.Fprintf(&tl.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.85"><title>%s</title></rect>`,
				x1, y, math.Max(x2-x1, 2), rowH-6, kindColor[e.Kind], html.EscapeString(e.String()))
		}
	}
	for g := range groups {
		ly := 20 + rowH*float64(total+g)
		label := "leader"
		if groups > 1 {
			label = fmt.Sprintf("g%d leader", g+1)
		}
		fmt.Fprintf(&tl.b, `<text x="5" y="%.1f">%s</text>`, ly+15, label)
		var gs []sample
		for _, s := range r.samples {
			if s.Group == g {
				gs = append(gs, s)
			}
		}
		// One bar per stretch of one leader and epoch, a tick at each start.
		for i := 0; i < len(gs); {
			s := gs[i]
			j := i + 1
			for j < len(gs) && gs[j].Leader == s.Leader && gs[j].Epoch == s.Epoch {
				j++
			}
			endAt := gs[j-1].At + 250*time.Millisecond
			if j < len(gs) {
				endAt = gs[j].At
			}
			i = j
			if s.Leader == 0 {
				continue
			}
			x1, x2 := tl.x(s.At.Seconds()), tl.x(endAt.Seconds())
			fmt.Fprintf(&tl.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>replica %d serving, epoch %d, %.1fs-%.1fs</title></rect><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`,
				x1, ly+3, math.Max(x2-x1, 0.5), rowH-6, replicaColor[(s.Leader-1)%len(replicaColor)], s.Leader, s.Epoch,
				s.At.Seconds(), endAt.Seconds(), x1, ly+1, x1, ly+rowH-1)
		}
	}
	tl.timeAxis()
	b.WriteString("<h2>Timeline</h2><p>Faults per replica (hover for details); the last rows are each group's serving leader, coloured by replica (")
	for i := 0; i < total; i++ {
		fmt.Fprintf(&b, `<span class="k" style="background:%s"></span>%d `, replicaColor[i%len(replicaColor)], i+1)
	}
	b.WriteString("), blank where none served.</p>")
	b.WriteString(tl.String())

	// Throughput.
	bk := buckets(r.History, end)
	maxRate := 1.0
	for _, x := range bk {
		maxRate = math.Max(maxRate, float64(x.acked+x.unknown))
	}
	tp := newPlot(1250, 220, tmax)
	tp.shade(r.Events, 10)
	ymax := maxRate * 1.1
	yOf := func(v float64) float64 { return 10 + (tp.h-tp.bottom-10)*(1-v/ymax) }
	for _, v := range []float64{0, ymax / 2, ymax} {
		fmt.Fprintf(&tp.b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f/s</text>`, tp.left-4, yOf(v)+4, v)
	}
	var ack, unk []string
	for i, x := range bk {
		ack = append(ack, fmt.Sprintf("%.1f,%.1f", tp.x(float64(i)+0.5), yOf(float64(x.acked))))
		unk = append(unk, fmt.Sprintf("%.1f,%.1f", tp.x(float64(i)+0.5), yOf(float64(x.unknown))))
	}
	fmt.Fprintf(&tp.b, `<polyline fill="none" stroke="#2a7d2a" stroke-width="1.5" points="%s"/>`, strings.Join(ack, " "))
	fmt.Fprintf(&tp.b, `<polyline fill="none" stroke="#c00" stroke-width="1" points="%s"/>`, strings.Join(unk, " "))
	tp.timeAxis()
	b.WriteString(`<h2>Throughput</h2><p>Sends ending in each second: <span style="color:#2a7d2a">acknowledged</span>, <span style="color:#c00">unknown outcome</span>; faults shaded.</p>`)
	b.WriteString(tp.String())

	// Latency, log scale.
	lp := newPlot(1250, 240, tmax)
	lp.shade(r.Events, 10)
	lo, hi := 0.0, 5.0 // 1 ms .. 100 s
	lyOf := func(ms float64) float64 {
		l := math.Log10(math.Max(ms, 1))
		return 10 + (lp.h-lp.bottom-10)*(1-(l-lo)/(hi-lo))
	}
	for _, ms := range []float64{1, 10, 100, 1000, 10000, 100000} {
		fmt.Fprintf(&lp.b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`,
			lp.left-4, lyOf(ms)+4, fmtMs(ms), lp.left, lyOf(ms), lp.w-10, lyOf(ms))
	}
	series := []struct {
		q     float64
		color string
	}{{0.5, "#1f77b4"}, {0.99, "#ff7f0e"}, {1, "#c00"}}
	for _, s := range series {
		// A new line after every second without an acknowledgement, so
		// an outage shows as a gap rather than a slope.
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&lp.b, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`, s.color, strings.Join(pts, " "))
			}
			pts = nil
		}
		for i, x := range bk {
			if len(x.lat) == 0 {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", lp.x(float64(i)+0.5), lyOf(quantile(x.lat, s.q))))
		}
		flush()
	}
	lp.timeAxis()
	b.WriteString(`<h2>Latency of acknowledged sends</h2><p>Per second, log scale: <span style="color:#1f77b4">p50</span>, <span style="color:#ff7f0e">p99</span>, <span style="color:#c00">max</span>.</p>`)
	b.WriteString(lp.String())

	// Failovers.
	b.WriteString("<h2>Failovers</h2><table><tr><th>at</th><th>group</th><th>from (epoch)</th><th>to (epoch)</th><th>no leader seen for</th><th>since the fault</th><th>fault</th></tr>")
	for _, f := range r.Failovers {
		since := "-"
		if f.Cause != "" {
			since = fmt.Sprintf("%.2fs", f.SinceFault.Seconds())
		}
		fmt.Fprintf(&b, "<tr><td>%.1fs</td><td>g%d</td><td>%d (%d)</td><td>%d (%d)</td><td>%.2fs</td><td>%s</td><td>%s</td></tr>",
			f.At.Seconds(), f.Group+1, f.From, f.FromEpoch, f.To, f.ToEpoch, f.Leaderless.Seconds(), since, html.EscapeString(f.Cause))
	}
	b.WriteString("</table>")

	// Anomalies.
	b.WriteString("<h2>Anomalies</h2>")
	if r.Report.OK() && r.ExtraCount == 0 {
		b.WriteString("<p>None.</p>")
	} else {
		b.WriteString("<table><tr><th>kind</th><th>count</th></tr>")
		for _, k := range checker.Kinds {
			if n := r.Report.Counts[k]; n > 0 {
				fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td></tr>", k, n)
			}
		}
		b.WriteString("</table>")
		for i, a := range r.Report.Anomalies {
			if i >= 300 {
				fmt.Fprintf(&b, "<p>(%d more not shown)</p>", len(r.Report.Anomalies)-i)
				break
			}
			fmt.Fprintf(&b, "<h3>%s %s/%d offset %d %s</h3><pre>%s</pre>", a.Kind, html.EscapeString(a.Topic), a.Partition, a.Offset,
				html.EscapeString(fmt.Sprintf("%q", a.Value)), html.EscapeString(strings.Join(a.Witness, "\n")))
		}
	}
	if r.ExtraCount > 0 {
		fmt.Fprintf(&b, "<h3>Harness checks: %s, %s and %s, %d</h3>", RewrittenRead, EpochRegression, TwoOwnersOneEpoch, r.ExtraCount)
		for _, a := range r.Extra[:min(len(r.Extra), 300)] {
			fmt.Fprintf(&b, "<h3>%s %s/%d offset %d %s</h3><pre>%s</pre>", a.Kind, html.EscapeString(a.Topic), a.Partition, a.Offset,
				html.EscapeString(fmt.Sprintf("%q", a.Value)), html.EscapeString(strings.Join(a.Witness, "\n")))
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "<p style=\"color:#c00\">Problem: %s</p>", html.EscapeString(p))
	}
	if len(r.Known) > 0 {
		fmt.Fprintf(&b, "<h3 style=\"color:#c60\">Known bug %s (tolerated, not fixed): %d anomalies</h3><p>%s</p>",
			FalseTruncation.ID, len(r.Known), html.EscapeString(FalseTruncation.Summary))
		for _, a := range r.Known[:min(len(r.Known), 100)] {
			fmt.Fprintf(&b, "<h3>%s %s/%d offset %d %s</h3><pre>%s</pre>", a.Kind, html.EscapeString(a.Topic), a.Partition, a.Offset,
				html.EscapeString(fmt.Sprintf("%q", a.Value)), html.EscapeString(strings.Join(a.Witness, "\n")))
		}
	}
	if len(r.DataLoss) > 0 {
		fmt.Fprintf(&b, "<h3>Consumers' data-loss notices (%d, of which %d false)</h3><pre>%s</pre>", len(r.DataLoss), len(r.FalseDataLoss),
			html.EscapeString(strings.Join(r.DataLoss, "\n")))
	}

	// Every fault, as text.
	b.WriteString("<h2>Fault log</h2><pre>")
	for _, e := range r.Events {
		b.WriteString(html.EscapeString(e.String()))
		b.WriteByte('\n')
	}
	b.WriteString("</pre>")

	// Client errors.
	if len(r.Errors) > 0 {
		b.WriteString("<h2>Client errors</h2><table><tr><th>count</th><th>error</th></tr>")
		keys := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return r.Errors[keys[i]] > r.Errors[keys[j]] })
		for _, k := range keys {
			fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td></tr>", r.Errors[k], html.EscapeString(k))
		}
		b.WriteString("</table>")
	}

	b.WriteString("<h2>Schedule</h2><pre>")
	for _, s := range r.Steps {
		b.WriteString(html.EscapeString(s.String()))
		b.WriteByte('\n')
	}
	b.WriteString("</pre></body></html>\n")
	return b.String()
}

func fmtMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%gs", ms/1000)
	}
	return fmt.Sprintf("%gms", ms)
}

func total(m map[checker.Kind]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
