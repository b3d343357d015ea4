package main

import (
	"math"
	"testing"

	"github.com/moonmq/moonmq/internal/bench"
)

func TestJoinRounds(t *testing.T) {
	round := func(records int64, secs, p50, cpu, rss float64) *bench.Report {
		return &bench.Report{Target: "moonmq", Results: []bench.CaseResult{{
			Case:    "acks=-1 p=1 pipelined",
			Produce: bench.ProduceResult{Records: records, Bytes: records * 1000, Seconds: secs, P50Ms: p50},
			Consume: bench.ConsumeResult{Records: records, Seconds: secs / 2, Complete: true},
			Broker:  &bench.BrokerUsage{Processes: 1, CPUSeconds: cpu, RSSPeakMB: rss},
		}}}
	}
	j := joinRounds([]*bench.Report{round(1_000_000, 2, 10, 1, 80), round(3_000_000, 2, 20, 2, 60)})
	if len(j.Results) != 1 {
		t.Fatalf("got %d cases, want 1", len(j.Results))
	}
	c := j.Results[0]
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("records/s", c.Produce.RecordsPerSec, 1_000_000)
	near("MB/s", c.Produce.MBPerSec, 1000)
	near("p50", c.Produce.P50Ms, 15)
	near("consume records/s", c.Consume.RecordsPerSec, 2_000_000)
	near("CPU s per M", c.Broker.CPUSecondsPerMillion, 0.75)
	near("peak RSS", c.Broker.RSSPeakMB, 80)
	if !c.Consume.Complete {
		t.Error("joined consume not complete though every round was")
	}
}
