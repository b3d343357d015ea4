package chaos

// The clock-step fault and what a run with it adds: the limits every
// retention and expiry of the run is set to, a little idle state that an
// early expiry would remove, and the check that nothing was removed.

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// clockFile is replica id's wall clock offset file.
func (in *injector) clockFile(id int) string {
	return filepath.Join(in.clockDir, fmt.Sprintf("replica-%d.clock-offset", id))
}

// clockStepLine is what a broker logs when it sees its wall clock step
// (internal/broker).
const clockStepLine = "the wall clock moved against broker time"

// stepClock runs a ClockStep on r: an hour ahead for half the hold, an
// hour behind for the other half, then back, and says what the broker
// saw of it.
func (in *injector) stepClock(r *testcluster.Replica, hold time.Duration) string {
	if in.clockDir == "" {
		return "skipped: the replicas were started without a clock offset file"
	}
	before := strings.Count(r.Log(), clockStepLine)
	path := in.clockFile(r.ID)
	var failed []string
	for _, st := range []struct{ d, hold time.Duration }{{time.Hour, hold / 2}, {-time.Hour, hold - hold/2}, {0, 0}} {
		if err := clock.WriteOffset(path, st.d); err != nil {
			failed = append(failed, err.Error())
		}
		sleep(st.hold)
	}
	// The last step is seen within a second; wait for it so the broker's
	// count is whole.
	seen := 0
	_ = testcluster.Poll(3*time.Second, func() (bool, string) {
		seen = strings.Count(r.Log(), clockStepLine) - before
		return seen >= 3, ""
	})
	detail := fmt.Sprintf("wall clock +1h for %v, -1h for %v, then back; steps the broker logged: %d of 3", (hold / 2).Round(time.Millisecond), (hold - hold/2).Round(time.Millisecond), seen)
	if len(failed) > 0 {
		detail += "; writing the offset failed: " + strings.Join(failed, "; ")
	}
	if seen == 0 || len(failed) > 0 {
		in.problem("the clock step of replica %d did not reach it: %s", r.ID, detail)
	}
	return detail
}

// clockStepLimit is the workload topics' retention.ms and the brokers'
// producer-id, transactional-id and offsets expiry in a run that steps
// clocks with schedule steps: twice the planned fault phase (steps overrun
// their plan) and 15 minutes for healing, the drain and the stops, so
// nothing of the run lives that long and nothing may be deleted or expire
// (earlyExpiries). A timer that followed a wall clock an hour ahead, or
// compared stamps taken an hour behind, fires for whatever is older than
// the limit less an hour: in runs planned under 22 minutes, for all of
// the idle state at every step (leaveIdleState).
func clockStepLimit(steps []Step, replicas int) time.Duration {
	var planned time.Duration
	if n := len(steps); n > 0 {
		last := steps[n-1]
		planned = last.At + last.Hold + expected(last.Kind, replicas)
	}
	return (2*planned + 15*time.Minute).Round(time.Minute)
}

// clockStepTimers are the brokers' settings in a run that steps clocks:
// every limit at limit, looked at every second, so that a timer firing an
// hour early does so while the step lasts.
func clockStepTimers(limit time.Duration) []testcluster.Option {
	return []testcluster.Option{
		testcluster.WithServer("RetentionCheckMs", 1000),
		testcluster.WithServer("ProducerIdExpirationMs", limit.Milliseconds()),
		testcluster.WithServer("ProducerIdExpirationCheckMs", 1000),
		testcluster.WithServer("TransactionalIdExpirationMs", limit.Milliseconds()),
		testcluster.WithServer("TransactionalIdExpirationCheckMs", 1000),
		testcluster.WithServer("OffsetsRetentionMinutes", int(limit.Minutes())),
		testcluster.WithServer("OffsetsRetentionCheckMs", 1000),
	}
}

// expiryLines start what a broker logs when retention deletes segments
// or an expiry removes state (internal/broker, groupcoord, txncoord).
var expiryLines = []string{
	"retention removed segments",
	"forgot idle producers",
	"expired an idle transactional id",
	"offsets retention: expired committed offsets",
}

// earlyExpiries returns a problem for every retention deletion or expiry
// the replicas logged in a run that steps clocks, where nothing is old
// enough for one (clockStepLimit).
func earlyExpiries(c *testcluster.Cluster) []string {
	var out []string
	for _, r := range c.Replicas {
		n := 0
		for _, line := range strings.Split(r.Log(), "\n") {
			for _, m := range expiryLines {
				if strings.Contains(line, m) {
					n++
					if n <= 3 {
						out = append(out, fmt.Sprintf("replica %d deleted or expired something no run lives long enough for (early by a clock step?): %s", r.ID, strings.TrimSpace(line)))
					}
				}
			}
		}
		if n > 3 {
			out = append(out, fmt.Sprintf("replica %d: %d more such lines", r.ID, n-3))
		}
	}
	return out
}

const (
	// idleTopic holds the state that stays idle for the whole of a run
	// that steps clocks (leaveIdleState); it is not part of the checked
	// history.
	idleTopic = "chaos-idle"
	idleTxnID = "chaos-idle-txn"
	idleGroup = "chaos-idle-group"
)

// leaveIdleState writes, once, what only an early retention or expiry
// would remove: closed segments of idleTopic (1 KiB segments, retention
// at limit), an idempotent producer and a transactional id that never
// write again, and a committed offset of a group without members. The
// workload's own producers and groups stay busy, so their state would
// survive even a timer that followed the wall clock.
func leaveIdleState(adm *kadm.Client, seeds []string, replicas int, limit time.Duration) error {
	err := createTopic(adm, idleTopic, 1, replicas, map[string]*string{
		"segment.bytes": kadm.StringPtr("1024"),
		"retention.ms":  kadm.StringPtr(fmt.Sprint(limit.Milliseconds())),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produce := func(opts ...kgo.Opt) (*kgo.Client, error) {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(idleTopic),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(20)}, opts...)...)
		if err != nil {
			return nil, err
		}
		// Each record fills a segment of its own.
		for i := range 3 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte{'a' + byte(i)}, 800)}).FirstErr(); err != nil {
				cl.Close()
				return nil, err
			}
		}
		return cl, nil
	}
	cl, err := produce()
	if err != nil {
		return fmt.Errorf("idle producer: %w", err)
	}
	cl.Close()
	tx, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(idleTopic), kgo.TransactionalID(idleTxnID))
	if err != nil {
		return err
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		return err
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("idle")}).FirstErr(); err != nil {
		return fmt.Errorf("idle transaction: %w", err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("idle transaction: %w", err)
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: idleTopic, Partition: 0, At: 1, LeaderEpoch: -1})
	resp, err := adm.CommitOffsets(ctx, idleGroup, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("idle group: %w", err)
	}
	return nil
}
