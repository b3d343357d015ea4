package bench

import (
	"bytes"
	"compress/flate"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(101-i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(s, tc.p); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("single sample p99 = %v, want 7", got)
	}
}

func TestBucketsRoundTrip(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 123456789, 1<<63 - 1, 1<<64 - 1} {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d out of range", v, i)
		}
		if i < prev {
			t.Fatalf("bucketOf not monotonic at %d", v)
		}
		prev = i
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d with range [%d, %d]", v, i, lo, hi)
		}
	}
}

func TestHistogramMatchesExactPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := new(Histogram)
	var exact []time.Duration
	for range 100000 {
		// Log-normal-ish latencies between ~10µs and ~100ms.
		d := time.Duration(10e3 * (1 + rng.ExpFloat64()*rng.ExpFloat64()*50))
		h.Record(d)
		exact = append(exact, d)
	}
	if h.Count() != uint64(len(exact)) {
		t.Fatalf("count %d, want %d", h.Count(), len(exact))
	}
	for _, p := range []float64{1, 50, 90, 99, 99.9, 100} {
		want := Percentile(exact, p)
		got := h.Quantile(p)
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("p%v: Histogram %v, exact %v (%.2f%% off)", p, got, want, diff*100)
		}
	}
	if new(Histogram).Quantile(50) != 0 {
		t.Error("empty Histogram quantile should be 0")
	}
}

func TestParseArgsDefaults(t *testing.T) {
	cfg, err := parseArgs(nil, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "127.0.0.1:9092" || cfg.RecordSize != 1024 || cfg.Duration != 10*time.Second {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
	cases := cfg.cases()
	if len(cases) != 8 {
		t.Fatalf("default cases = %d, want 8", len(cases))
	}
	if got := cases[0].label(); got != "acks=1 p=1 pipelined" {
		t.Errorf("first case %q", got)
	}
	if got := cases[7].label(); got != "acks=-1 p=8 one-at-a-time" {
		t.Errorf("last case %q", got)
	}
}

func TestParseArgs(t *testing.T) {
	cfg, err := parseArgs([]string{
		"--brokers", "a:1, b:2", "--acks", "all,0", "--partitions", "3", "--modes", "sync",
		"--records", "500", "--record-size", "100", "--name", "kfake", "--json", "out.json",
	}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Brokers) != 2 || cfg.Brokers[1] != "b:2" {
		t.Errorf("brokers %q", cfg.Brokers)
	}
	if len(cfg.Acks) != 2 || cfg.Acks[0] != -1 || cfg.Acks[1] != 0 {
		t.Errorf("acks %v", cfg.Acks)
	}
	if len(cfg.Modes) != 1 || cfg.Modes[0] != ModeOneAtATime || cfg.Partitions[0] != 3 {
		t.Errorf("modes %v partitions %v", cfg.Modes, cfg.Partitions)
	}
	if cfg.Records != 500 || cfg.RecordSize != 100 || cfg.Name != "kfake" || cfg.JSONPath != "out.json" {
		t.Errorf("unexpected config %+v", cfg)
	}
	cfg.RunID = "r1"
	if got := topicName(cfg, cfg.cases()[0]); got != "moonmq-bench-r1-acksall-p3-sync" {
		t.Errorf("topic name %q", got)
	}
}

// TestTransformCasesNeedAcksAll: consume-transform-produce runs only at
// acks=-1, as transactions must, and its topics say so.
func TestTransformCasesNeedAcksAll(t *testing.T) {
	cfg, err := parseArgs([]string{"--acks", "1,-1", "--partitions", "8", "--modes", "ctp,pipelined"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunID = "r1"
	var got []string
	for _, c := range cfg.cases() {
		got = append(got, topicName(cfg, c))
	}
	want := []string{"moonmq-bench-r1-acks1-p8-pipe", "moonmq-bench-r1-acksall-p8-ctp", "moonmq-bench-r1-acksall-p8-pipe"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("cases' topics %q, want %q", got, want)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--acks", "2"},
		{"--acks", ""},
		{"--partitions", "0"},
		{"--partitions", "x"},
		{"--modes", "fast"},
		{"--record-size", "0"},
		{"--records", "0", "--duration", "0"},
		{"--partitioner", "hash"},
		{"--brokers", " , "},
		{"extra"},
		{"--no-such-flag"},
		{"--modes", "e2e"},
		{"--modes", "e2e", "--rate", "100", "--records", "10"},
	} {
		if _, err := parseArgs(args, new(bytes.Buffer)); err == nil {
			t.Errorf("parseArgs(%q) succeeded, want error", args)
		}
	}
}

func TestCommandHelp(t *testing.T) {
	var stderr bytes.Buffer
	if err := Command(t.Context(), []string{"-h"}, new(bytes.Buffer), &stderr); err != nil {
		t.Fatalf("help returned %v", err)
	}
	if !strings.Contains(stderr.String(), "--partitions") && !strings.Contains(stderr.String(), "-partitions") {
		t.Errorf("usage does not mention partitions:\n%s", stderr.String())
	}
}

func TestValuePoolIncompressible(t *testing.T) {
	p := NewValuePool(1024)
	var all bytes.Buffer
	seen := map[*byte]bool{}
	for range 64 {
		v := p.Next()
		if len(v) != 1024 || cap(v) != 1024 {
			t.Fatalf("value len %d cap %d", len(v), cap(v))
		}
		if seen[&v[0]] {
			t.Fatal("value window reused too early")
		}
		seen[&v[0]] = true
		all.Write(v)
	}
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.BestCompression)
	w.Write(all.Bytes())
	w.Close()
	if z.Len() < all.Len()*99/100 {
		t.Errorf("values compress from %d to %d bytes", all.Len(), z.Len())
	}
}

func TestTableAndRates(t *testing.T) {
	r := &Report{Target: "x", Brokers: "b", RecordSize: 1024, Duration: 1, Results: []CaseResult{{
		Case:    "acks=-1 p=1 pipelined",
		Produce: ProduceResult{RecordsPerSec: 20000, MBPerSec: 20.5, P50Ms: 0.5, P99Ms: 2},
		Consume: ConsumeResult{RecordsPerSec: 80000},
	}, {Case: "acks=1 p=1 pipelined", Error: "boom"}}}
	var out bytes.Buffer
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"20.0k", "80.0k", "4.0x", "0.500", "! acks=1 p=1 pipelined: boom"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if rate(10, 0) != 0 || rate(10, 2) != 5 {
		t.Error("rate")
	}
	if humanRate(950) != "950" || humanRate(1.2e6) != "1.20M" {
		t.Error("humanRate")
	}
}
