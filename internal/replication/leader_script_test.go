package replication

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/datadriven"
)

// TestLeaderScripts runs the scenarios of testdata/leader: each script
// drives one Leader through its inputs (configure, append, fetch, tick,
// commit...) and every command prints the state a reader checks against
// the rule it illustrates. Go test -run TestLeaderScripts -rewrite
// regenerates the outputs.
func TestLeaderScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/leader", func(t *testing.T) func(*datadriven.Cmd) string {
		s := &leaderScript{t: t}
		return s.run
	})
}

type leaderScript struct {
	t *testing.T
	l *Leader
	// proposed is the last change handed out by Proposals, for commit
	// and fail.
	proposed *ISRChange
}

func (s *leaderScript) run(c *datadriven.Cmd) string {
	t := s.t
	if c.Name != "new" && s.l == nil {
		c.Fatalf(t, "no leader yet: start the script with new")
	}
	tp := TopicPartition{Topic: "t", Partition: int32(c.Int(t, "p", 0))}
	switch c.Name {
	case "new":
		var opts []Option
		if c.Has("min-isr") {
			opts = append(opts, WithMinISR(int(c.Int(t, "min-isr", 0))))
		}
		if c.Has("lag") {
			opts = append(opts, WithIsrLag(s.duration(c, "lag")))
		}
		if c.Has("silent") {
			opts = append(opts, WithSilentRemoval(s.duration(c, "silent")))
		}
		if c.Has("static") {
			opts = append(opts, WithStatic(c.Int(t, "static", 0)))
		}
		s.l = NewLeader(opts...)
		s.proposed = nil
		return "ok"
	case "configure":
		ok := s.l.Configure(c.Int32s(t, "replicas"), int32(c.Int(t, "self", 1)), c.Int32s(t, "isr"), int32(c.Int(t, "epoch", 1)))
		return fmt.Sprintf("accepted=%v\n%s", ok, s.state())
	case "append":
		end := c.Int(t, "end", 0)
		s.l.AppendLocal(tp, end, c.Int(t, "durable", end))
	case "fetch":
		if !s.l.FollowerFetch(int32(c.Int(t, "replica", 0)), tp, c.Int(t, "offset", 0), s.at(c)) {
			return "ignored\n" + s.state()
		}
	case "tick":
		s.l.Tick(s.at(c))
	case "seed-hw":
		s.l.SeedHighWatermark(tp, c.Int(t, "hw", 0))
	case "min-isr":
		s.l.SetMinISR(tp, int(c.Int(t, "n", 0)))
	case "heard":
		s.l.Heard(int32(c.Int(t, "replica", 0)))
	case "remove":
		s.l.RemovePartition(tp)
	case "commit":
		// The Raft log commits the last proposal, or (isr=, epoch=) a
		// change the script names, as an entry another leader proposed.
		isr, epoch := c.Int32s(t, "isr"), int32(c.Int(t, "epoch", int64(s.l.Epoch())))
		if isr == nil {
			if s.proposed == nil {
				c.Fatalf(t, "nothing proposed to commit")
			}
			isr, epoch = s.proposed.ISR, s.proposed.Epoch
		}
		ok := s.l.ISRCommitted(isr, epoch)
		s.proposed = nil
		return fmt.Sprintf("applied=%v\n%s", ok, s.state())
	case "fail":
		if s.proposed == nil {
			c.Fatalf(t, "nothing proposed to fail")
		}
		s.l.ProposalFailed(*s.proposed)
		s.proposed = nil
	default:
		c.Fatalf(t, "unknown command")
	}
	return s.state()
}

// state prints the leader's observable state: every partition's high
// watermark, the ISR, the acks=all set, min.insync.replicas and the change
// to propose, if any (handing it out, as the driver would).
func (s *leaderScript) state() string {
	l := s.l
	var b strings.Builder
	var hws []string
	tps := make([]TopicPartition, 0, len(l.parts))
	for tp := range l.parts {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int { return int(a.Partition - b.Partition) })
	for _, tp := range tps {
		hws = append(hws, fmt.Sprintf("p%d=%d", tp.Partition, l.HighWatermark(tp)))
	}
	if len(hws) == 0 {
		hws = []string{"none"}
	}
	fmt.Fprintf(&b, "hw: %s\nisr=%v ack-set=%v under-min-isr=%v", strings.Join(hws, " "), l.ISR(), l.AckSet(), l.UnderMinISR())
	for _, c := range l.Proposals() {
		verb := "shrink"
		if c.Expand {
			verb = "expand"
		}
		fmt.Fprintf(&b, "\npropose %s replica=%d isr=%v epoch=%d", verb, c.Replica, c.ISR, c.Epoch)
		s.proposed = &c
	}
	return b.String()
}

// at reads at=SECONDS, the time since the script's start.
func (s *leaderScript) at(c *datadriven.Cmd) time.Time {
	v := c.Str("at", "0")
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil {
		c.Fatalf(s.t, "at=%q: %v", v, err)
	}
	return t0.Add(time.Duration(sec * float64(time.Second)))
}

func (s *leaderScript) duration(c *datadriven.Cmd, key string) time.Duration {
	d, err := time.ParseDuration(c.Str(key, ""))
	if err != nil {
		c.Fatalf(s.t, "%s: %v", key, err)
	}
	return d
}
