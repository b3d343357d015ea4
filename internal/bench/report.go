package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// ReportVersion is the version of the JSON report format written by --json.
// The bench/ module's tools read and write the same shape.
const ReportVersion = 1

// Report is the JSON document written by --json.
type Report struct {
	Version    int          `json:"version"`     // ReportVersion
	Target     string       `json:"target"`      // --name, e.g. "moonmq"
	Brokers    string       `json:"brokers"`     // where the target was reached
	Tool       string       `json:"tool"`        // what produced the report, e.g. "moonmq bench"
	Started    time.Time    `json:"started"`     // when the run began
	RecordSize int          `json:"record_size"` // value bytes per record
	Duration   float64      `json:"duration_s"`  // configured produce seconds per case (0 when count-bound)
	Records    int64        `json:"records"`     // configured records per case (0 when time-bound)
	Host       HostInfo     `json:"host"`        // machine the load generator ran on
	Notes      []string     `json:"notes,omitempty"`
	Results    []CaseResult `json:"results"`
}

// HostInfo describes the machine a report was produced on.
type HostInfo struct {
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	NumCPU int    `json:"num_cpu"`
}

// CaseResult is the outcome of one acks × partitions × mode case.
type CaseResult struct {
	Case       string        `json:"case"` // e.g. "acks=-1 p=8 pipelined"
	Acks       int           `json:"acks"`
	Partitions int           `json:"partitions"`
	Mode       string        `json:"mode"` // "pipelined" or "one-at-a-time"
	Topic      string        `json:"topic"`
	Produce    ProduceResult `json:"produce"`
	Consume    ConsumeResult `json:"consume"`
	// Broker is the broker processes' usage while producing, when
	// --broker-pids named them.
	Broker *BrokerUsage `json:"broker,omitempty"`
	Error  string       `json:"error,omitempty"` // set when the case could not run to completion
}

// ProduceResult holds the producer-side measurements of a case. MB is 10^6
// bytes of record values (keys and protocol overhead are not counted).
type ProduceResult struct {
	Records       int64   `json:"records"` // successfully acknowledged records
	Errors        int64   `json:"errors"`  // records whose produce failed
	Bytes         int64   `json:"bytes"`
	Seconds       float64 `json:"seconds"` // from the first Produce call to the last acknowledgement
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	P50Ms         float64 `json:"p50_ms"` // per-record latency, Produce call to promise
	P99Ms         float64 `json:"p99_ms"`
	P999Ms        float64 `json:"p999_ms"`
	MaxMs         float64 `json:"max_ms"`
}

// fill sets the producer-side figures of a phase that had records
// acknowledged and errors failed, each recordSize bytes, in elapsed, with
// their latencies in hist.
func (out *ProduceResult) fill(records, errors int64, recordSize int, elapsed time.Duration, hist *Histogram) {
	out.Records, out.Errors = records, errors
	out.Bytes = records * int64(recordSize)
	out.Seconds = elapsed.Seconds()
	out.RecordsPerSec = rate(float64(out.Records), out.Seconds)
	out.MBPerSec = rate(float64(out.Bytes)/1e6, out.Seconds)
	out.P50Ms, out.P99Ms, out.P999Ms = ms(hist.Quantile(50)), ms(hist.Quantile(99)), ms(hist.Quantile(99.9))
	out.MaxMs = ms(hist.Max())
}

// ConsumeResult holds the consumer-side measurements of a case.
type ConsumeResult struct {
	Records       int64   `json:"records"`
	Bytes         int64   `json:"bytes"`
	Seconds       float64 `json:"seconds"` // from consumer creation to the last record
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	Complete      bool    `json:"complete"` // every acknowledged record was read back
	// End-to-end latency (end-to-end mode only): from the Produce call to
	// the consumer holding the record.
	E2EP50Ms  float64 `json:"e2e_p50_ms,omitempty"`
	E2EP99Ms  float64 `json:"e2e_p99_ms,omitempty"`
	E2EP999Ms float64 `json:"e2e_p999_ms,omitempty"`
	E2EMaxMs  float64 `json:"e2e_max_ms,omitempty"`
}

// rate returns n per second, or 0 for a zero duration.
func rate(n float64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return n / secs
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteJSON writes the report to path as indented JSON.
func WriteJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable writes the human-readable summary table of a report.
func WriteTable(w io.Writer, r *Report) error {
	bound := fmt.Sprintf("%gs/case", r.Duration)
	if r.Records > 0 {
		bound = fmt.Sprintf("%d records/case", r.Records)
	}
	fmt.Fprintf(w, "\n%s (%s): %d-byte records, %s, %d CPUs\n", r.Target, r.Brokers, r.RecordSize, bound, r.Host.NumCPU)
	usage := false
	for _, c := range r.Results {
		usage = usage || c.Broker != nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "case\tprod rec/s\tprod MB/s\tp50 ms\tp99 ms\tp999 ms\tcons rec/s\tcons MB/s\tcons/prod\terrors\t"
	if usage {
		hdr += "broker cpu s/M rec\tbroker rss MB start/peak\t"
	}
	fmt.Fprintln(tw, hdr)
	for _, c := range r.Results {
		cp := "-"
		if c.Produce.RecordsPerSec > 0 && c.Consume.RecordsPerSec > 0 {
			cp = fmt.Sprintf("%.1fx", c.Consume.RecordsPerSec/c.Produce.RecordsPerSec)
		}
		errs := fmt.Sprint(c.Produce.Errors)
		if c.Error != "" {
			errs += " !"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.3f\t%.3f\t%.3f\t%s\t%.1f\t%s\t%s\t",
			c.Case, humanRate(c.Produce.RecordsPerSec), c.Produce.MBPerSec, c.Produce.P50Ms, c.Produce.P99Ms, c.Produce.P999Ms,
			humanRate(c.Consume.RecordsPerSec), c.Consume.MBPerSec, cp, errs)
		if usage {
			if u := c.Broker; u != nil {
				fmt.Fprintf(tw, "%.2f\t%.0f/%.0f\t", u.CPUSecondsPerMillion, u.RSSStartMB, u.RSSPeakMB)
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Results {
		if c.Mode == string(ModeEndToEnd) {
			fmt.Fprintf(w, "%s: end-to-end p50 %.3f ms, p99 %.3f ms, p999 %.3f ms, max %.3f ms\n",
				c.Case, c.Consume.E2EP50Ms, c.Consume.E2EP99Ms, c.Consume.E2EP999Ms, c.Consume.E2EMaxMs)
		}
	}
	for _, c := range r.Results {
		if c.Error != "" {
			fmt.Fprintf(w, "! %s: %s\n", c.Case, c.Error)
		}
	}
	return nil
}

// humanRate formats a per-second rate compactly: 950, 12.3k, 1.20M.
func humanRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// Rate returns n per second over secs seconds, or 0 when secs is not
// positive. Tools filling a Report by hand use it for the rate fields.
func Rate(n, secs float64) float64 { return rate(n, secs) }

// Millis converts a duration to fractional milliseconds, the unit of the
// latency fields of ProduceResult.
func Millis(d time.Duration) float64 { return ms(d) }
