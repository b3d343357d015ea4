// Command plot draws a line chart (SVG) of `moonmq bench` reports, one line
// per series, so a reader sees how a cost grows with the partition count or
// the record size. The x axis is logarithmic.
//
//	plot --out docs/scale-partitions.svg --title "..." --x partitions --y records_per_sec \
//	  moonmq=results/moonmq-scale.json kafka=results/kafka-scale.json
//
// A series is NAME=FILE[,FILE...]; every case of every file is a point.
// --x is partitions or record_size; --y is records_per_sec, mb_per_sec,
// rss_peak_mb, cpu_seconds_per_million or p99_ms.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/moonmq/moonmq/internal/bench"
)

type point struct{ x, y float64 }

type series struct {
	name   string
	points []point
}

func main() {
	out := flag.String("out", "", "SVG file to write")
	title := flag.String("title", "", "chart title")
	xField := flag.String("x", "partitions", "x value: partitions or record_size")
	yField := flag.String("y", "records_per_sec", "y value: records_per_sec, mb_per_sec, rss_peak_mb, cpu_seconds_per_million or p99_ms")
	yLabel := flag.String("ylabel", "", "y axis label (default: --y)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fail("usage: plot --out FILE.svg [--x ...] [--y ...] NAME=FILE[,FILE...]...")
	}
	var all []series
	for _, arg := range flag.Args() {
		name, files, ok := strings.Cut(arg, "=")
		if !ok {
			fail("series %q is not NAME=FILE[,FILE...]", arg)
		}
		s := series{name: name}
		for _, f := range strings.Split(files, ",") {
			var r bench.Report
			b, err := os.ReadFile(f)
			if err != nil {
				fail("%v", err)
			}
			if err := json.Unmarshal(b, &r); err != nil {
				fail("%s: %v", f, err)
			}
			for _, c := range r.Results {
				if c.Error != "" {
					continue
				}
				x, y, ok := values(&r, &c, *xField, *yField)
				if ok {
					s.points = append(s.points, point{x, y})
				}
			}
		}
		sort.Slice(s.points, func(i, j int) bool { return s.points[i].x < s.points[j].x })
		all = append(all, s)
	}
	if *yLabel == "" {
		*yLabel = *yField
	}
	if err := os.WriteFile(*out, []byte(svg(*title, *xField, *yLabel, all)), 0o644); err != nil {
		fail("%v", err)
	}
}

func values(r *bench.Report, c *bench.CaseResult, xf, yf string) (x, y float64, ok bool) {
	switch xf {
	case "partitions":
		x = float64(c.Partitions)
	case "record_size":
		x = float64(r.RecordSize)
	default:
		fail("unknown --x %q", xf)
	}
	switch yf {
	case "records_per_sec":
		y = c.Produce.RecordsPerSec
	case "mb_per_sec":
		y = c.Produce.MBPerSec
	case "p99_ms":
		y = c.Produce.P99Ms
	case "rss_peak_mb", "cpu_seconds_per_million":
		if c.Broker == nil {
			return 0, 0, false
		}
		y = c.Broker.RSSPeakMB
		if yf == "cpu_seconds_per_million" {
			y = c.Broker.CPUSecondsPerMillion
		}
	default:
		fail("unknown --y %q", yf)
	}
	return x, y, x > 0
}

// Chart geometry, in SVG user units.
const (
	width, height          = 640, 400
	left, right, top, bott = 80, 150, 40, 50
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}

func svg(title, xLabel, yLabel string, all []series) string {
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range all {
		for _, p := range s.points {
			minX, maxX, maxY = math.Min(minX, p.x), math.Max(maxX, p.x), math.Max(maxY, p.y)
		}
	}
	if math.IsInf(minX, 1) {
		minX, maxX, maxY = 1, 10, 1
	}
	if maxX <= minX {
		maxX = minX * 10
	}
	maxY = niceCeil(maxY)
	lx0, lx1 := math.Log10(minX), math.Log10(maxX)
	pw, ph := float64(width-left-right), float64(height-top-bott)
	px := func(x float64) float64 { return float64(left) + (math.Log10(x)-lx0)/(lx1-lx0)*pw }
	py := func(y float64) float64 { return float64(top) + ph - y/maxY*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, esc(title))
	// Grid and ticks: y in fifths, x at each point's value.
	for i := 0; i <= 5; i++ {
		y := maxY * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, human(y))
	}
	xs := map[float64]bool{}
	for _, s := range all {
		for _, p := range s.points {
			xs[p.x] = true
		}
	}
	for x := range xs {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>`+"\n", px(x), px(x), top, height-bott)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(x), height-bott+16, human(x))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", left, width-right, height-bott, height-bott)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", left, left, top, height-bott)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s (log scale)</text>`+"\n", float64(left)+pw/2, height-12, esc(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, esc(yLabel))
	for i, s := range all {
		c := colors[i%len(colors)]
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.x), py(p.y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`+"\n", px(p.x), py(p.y), c, esc(s.name), human(p.y), human(p.x))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := top + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", width-right+12, width-right+32, ly, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", width-right+38, ly+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "plot: "+format+"\n", a...)
	os.Exit(1)
}
