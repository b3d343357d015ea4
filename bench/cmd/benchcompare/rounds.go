package main

import (
	"fmt"
	"strings"

	"github.com/moonmq/moonmq/internal/bench"
)

// joinRounds makes one report of several runs of the same cases against
// one target. A case missing from a later round keeps the rounds it has.
func joinRounds(rounds []*bench.Report) *bench.Report {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := *rounds[0]
	out.Results = nil
	out.Notes = append(append([]string(nil), out.Notes...), fmt.Sprintf("joined from %d rounds", len(rounds)))
	var order []string
	byCase := map[string][]bench.CaseResult{}
	for _, r := range rounds {
		for _, c := range r.Results {
			if _, ok := byCase[c.Case]; !ok {
				order = append(order, c.Case)
			}
			byCase[c.Case] = append(byCase[c.Case], c)
		}
	}
	for _, name := range order {
		out.Results = append(out.Results, joinCase(byCase[name]))
	}
	return &out
}

// joinCase sums the rounds' counts and times, so rates are overall rates;
// percentiles, which cannot be summed, are the rounds' mean.
func joinCase(cs []bench.CaseResult) bench.CaseResult {
	j := cs[0]
	if len(cs) == 1 {
		return j
	}
	n := float64(len(cs))
	var errs []string
	pr, co := &j.Produce, &j.Consume
	*pr, *co = bench.ProduceResult{}, bench.ConsumeResult{Complete: true}
	var usage bench.BrokerUsage
	measured := 0
	for _, c := range cs {
		if c.Error != "" {
			errs = append(errs, c.Error)
		}
		p := c.Produce
		pr.Records += p.Records
		pr.Errors += p.Errors
		pr.Bytes += p.Bytes
		pr.Seconds += p.Seconds
		pr.P50Ms += p.P50Ms / n
		pr.P99Ms += p.P99Ms / n
		pr.P999Ms += p.P999Ms / n
		pr.MaxMs = max(pr.MaxMs, p.MaxMs)
		k := c.Consume
		co.Records += k.Records
		co.Bytes += k.Bytes
		co.Seconds += k.Seconds
		co.Complete = co.Complete && k.Complete
		co.E2EP50Ms += k.E2EP50Ms / n
		co.E2EP99Ms += k.E2EP99Ms / n
		co.E2EP999Ms += k.E2EP999Ms / n
		co.E2EMaxMs = max(co.E2EMaxMs, k.E2EMaxMs)
		if b := c.Broker; b != nil {
			measured++
			usage.Processes = b.Processes
			usage.CPUSeconds += b.CPUSeconds
			usage.RSSStartMB += b.RSSStartMB
			usage.RSSPeakMB = max(usage.RSSPeakMB, b.RSSPeakMB)
		}
	}
	if pr.Seconds > 0 {
		pr.RecordsPerSec = float64(pr.Records) / pr.Seconds
		pr.MBPerSec = float64(pr.Bytes) / 1e6 / pr.Seconds
	}
	if co.Seconds > 0 {
		co.RecordsPerSec = float64(co.Records) / co.Seconds
		co.MBPerSec = float64(co.Bytes) / 1e6 / co.Seconds
	}
	j.Broker = nil
	if measured == len(cs) {
		usage.RSSStartMB /= n
		if pr.Records > 0 {
			usage.CPUSecondsPerMillion = usage.CPUSeconds / (float64(pr.Records) / 1e6)
		}
		j.Broker = &usage
	}
	j.Error = strings.Join(errs, "; ")
	return j
}
