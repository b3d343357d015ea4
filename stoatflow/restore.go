package stoatflow

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/crashpoint"
	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

func timeAfter(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }

// restoreProgress is what /health/ready and /metrics report while stores
// restore.
type restoreProgress struct {
	total, done atomic.Int64
}

type restoreTarget struct {
	part  *state.Partition
	spec  *storeSpec
	topic string
	from  int64 // first offset to read
	end   int64 // the high watermark taken after the fence
	last  int64 // last offset applied (or reached)
	// lastTs is the timestamp of the last record applied: how old the
	// standby's state is when it lags.
	lastTs time.Time
}

// restoreAll brings every store partition from its checkpoint to its
// changelog's high watermark. The watermark, not the last stable offset,
// is the target: the fence in open has already ended any transaction an
// earlier instance left open, so nothing can hold the stable offset back,
// and a target below the watermark would let this instance resume on
// state older than what was committed.
func (a *App) restoreAll(ctx context.Context) error {
	byTP, assign, total, err := a.restoreTargets(ctx)
	if err != nil {
		return err
	}
	a.restore.total.Store(total)
	a.restore.done.Store(0)
	if len(byTP) == 0 {
		return nil
	}
	start := time.Now()
	a.log.Info("restoring stores from their changelogs", "partitions", len(byTP), "records", total)
	cl, err := a.changelogConsumer(assign)
	if err != nil {
		return err
	}
	defer cl.Close()
	ap := newApplier(a)
	defer ap.close()
	lastLog := time.Now()
	for len(byTP) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := ap.apply(fs, byTP, true)
		if err != nil {
			return err
		}
		if n > 0 {
			crashpoint.Hit(crashpoint.MidRestore)
		}
		done := a.restore.done.Add(n)
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			a.log.Info("restoring", "records", done, "of", total, "percent", fmt.Sprintf("%.1f", 100*float64(done)/float64(max(total, 1))),
				"rate_per_s", int64(float64(done)/time.Since(start).Seconds()))
		}
	}
	if err := a.disk.Flush(); err != nil {
		return err
	}
	a.log.Info("stores restored", "records", a.restore.done.Load(), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// changelogConsumer reads changelog partitions from the given offsets:
// read_committed under exactly-once, keeping control records so that a
// partition whose tail is a transaction marker is seen to its end.
func (a *App) changelogConsumer(assign map[string]map[int32]kgo.Offset) (*kgo.Client, error) {
	base, err := a.clientOpts()
	if err != nil {
		return nil, err
	}
	maxBytes, partBytes := int32(64<<20), int32(16<<20)
	if crashpoint.ApplyDelay() > 0 {
		// The test of a lagging standby: small fetches, so that it
		// really falls behind.
		maxBytes, partBytes = 1<<10, 1<<10
	}
	opts := append(base, kgo.ConsumePartitions(assign), kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(maxBytes), kgo.FetchMaxPartitionBytes(partBytes), kgo.FetchMaxWait(100*time.Millisecond))
	if a.exactlyOnce() {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	return kgo.NewClient(opts...)
}

// applier writes fetched changelog records into the local engines, one
// batch per engine per fetch, each record's offset with it.
type applier struct {
	a         *App
	restorers map[*state.Engine]*state.Restorer
}

func newApplier(a *App) *applier {
	return &applier{a: a, restorers: map[*state.Engine]*state.Restorer{}}
}

func (ap *applier) close() {
	for _, r := range ap.restorers {
		r.Close()
	}
}

// apply applies what fs holds for the targets and returns how many
// offsets it advanced. With untilEnd, a target that reached its end is
// removed from targets. Every target's HighWatermark is updated from the
// fetch (a standby's lag is read from its own consumer).
func (ap *applier) apply(fs kgo.Fetches, targets map[tp]*restoreTarget, untilEnd bool) (int64, error) {
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		ap.a.log.Warn("changelog fetch error", "topic", t, "partition", p, "err", err)
		ferr = err
	})
	if ferr != nil && fs.NumRecords() == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	var n int64
	var aerr error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		t := targets[tp{p.Topic, p.Partition}]
		if t == nil {
			return
		}
		if !untilEnd && p.HighWatermark > t.end {
			t.end = p.HighWatermark
		}
		for _, r := range p.Records {
			if aerr != nil || r.Offset <= t.last {
				continue
			}
			rs := ap.restorers[t.part.Engine()]
			if rs == nil {
				rs = t.part.Engine().NewRestorer()
				ap.restorers[t.part.Engine()] = rs
			}
			if r.Attrs.IsControl() {
				aerr = rs.SetOffset(t.part, r.Offset)
			} else {
				aerr = rs.Apply(t.part, r.Key, r.Value, r.Offset)
				t.lastTs = r.Timestamp
			}
			n += r.Offset - t.last
			t.last = r.Offset
		}
		if untilEnd && t.last+1 >= t.end {
			delete(targets, tp{p.Topic, p.Partition})
		}
	})
	if aerr != nil {
		return n, fmt.Errorf("apply changelog: %w", aerr)
	}
	for _, rs := range ap.restorers {
		if err := rs.Commit(); err != nil {
			return n, fmt.Errorf("apply changelog: %w", err)
		}
	}
	ap.a.metrics.restored.Add(float64(n))
	return n, nil
}

// restoreTargets reads each store partition's checkpoint, wipes those
// whose checkpoint is not valid, and returns the partitions with records
// to read up to the current end, where to read them from, and how many
// there are.
func (a *App) restoreTargets(ctx context.Context) (map[tp]*restoreTarget, map[string]map[int32]kgo.Offset, int64, error) {
	return a.changelogTargets(ctx, false)
}

// changelogTargets is restoreTargets; with all, it also returns the
// partitions that are already at their end (a standby reads them all,
// from wherever they are, for as long as it runs).
func (a *App) changelogTargets(ctx context.Context, all bool) (map[tp]*restoreTarget, map[string]map[int32]kgo.Offset, int64, error) {
	var targets []*restoreTarget
	var topics []string
	for _, sub := range a.subs {
		for _, s := range sub.stores {
			if !s.changelog {
				continue
			}
			topics = append(topics, a.changelogTopic(s))
			for p := 0; p < sub.partitions; p++ {
				targets = append(targets, &restoreTarget{part: a.engineFor(s).Partition(s.name, int32(p)), spec: s, topic: a.changelogTopic(s)})
			}
		}
	}
	if len(targets) == 0 {
		return nil, nil, 0, nil
	}
	ends, err := a.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("list changelog end offsets: %w", err)
	}
	starts, err := a.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("list changelog start offsets: %w", err)
	}
	assign := map[string]map[int32]kgo.Offset{}
	byTP := map[tp]*restoreTarget{}
	var total int64
	for _, t := range targets {
		e, ok := ends.Lookup(t.topic, t.part.Part)
		if !ok || e.Err != nil {
			return nil, nil, 0, fmt.Errorf("changelog %s/%d: no end offset (%v)", t.topic, t.part.Part, e.Err)
		}
		s, _ := starts.Lookup(t.topic, t.part.Part)
		t.end = e.Offset
		off, have, err := t.part.Offset()
		if err != nil {
			return nil, nil, 0, err
		}
		wipe := ""
		switch {
		case !have:
			empty, err := t.part.Empty()
			if err != nil {
				return nil, nil, 0, err
			}
			if !empty {
				wipe = "it has data but no checkpoint"
			}
		case off+1 > t.end:
			wipe = fmt.Sprintf("its checkpoint (offset %d) is past the changelog's end (%d): the changelog was recreated", off, t.end)
		case off+1 < s.Offset:
			wipe = fmt.Sprintf("its checkpoint (offset %d) is before the changelog's start (%d)", off, s.Offset)
		}
		if wipe != "" {
			a.log.Warn("wiping store partition; it is rebuilt from the changelog", "store", t.spec.name, "partition", t.part.Part, "why", wipe)
			if err := t.part.Wipe(); err != nil {
				return nil, nil, 0, err
			}
			have = false
		}
		t.from = s.Offset
		if have {
			t.from = off + 1
		}
		t.last = t.from - 1
		if t.from >= t.end && !all {
			continue
		}
		total += max(t.end-t.from, 0)
		if assign[t.topic] == nil {
			assign[t.topic] = map[int32]kgo.Offset{}
		}
		assign[t.topic][t.part.Part] = kgo.NewOffset().At(t.from)
		byTP[tp{t.topic, t.part.Part}] = t
	}
	return byTP, assign, total, nil
}
