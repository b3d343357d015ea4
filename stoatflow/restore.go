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
}

// restoreAll brings every store partition from its checkpoint to its
// changelog's high watermark. The watermark, not the last stable offset,
// is the target: the fence in open has already ended any transaction an
// earlier instance left open, so nothing can hold the stable offset back,
// and a target below the watermark would let this instance resume on
// state older than what was committed.
func (a *App) restoreAll(ctx context.Context) error {
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
		return nil
	}
	ends, err := a.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list changelog end offsets: %w", err)
	}
	starts, err := a.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list changelog start offsets: %w", err)
	}
	assign := map[string]map[int32]kgo.Offset{}
	byTP := map[tp]*restoreTarget{}
	var total int64
	for _, t := range targets {
		e, ok := ends.Lookup(t.topic, t.part.Part)
		if !ok || e.Err != nil {
			return fmt.Errorf("changelog %s/%d: no end offset (%v)", t.topic, t.part.Part, e.Err)
		}
		s, _ := starts.Lookup(t.topic, t.part.Part)
		t.end = e.Offset
		off, have, err := t.part.Offset()
		if err != nil {
			return err
		}
		wipe := ""
		switch {
		case !have:
			empty, err := t.part.Empty()
			if err != nil {
				return err
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
				return err
			}
			have = false
		}
		t.from = s.Offset
		if have {
			t.from = off + 1
		}
		t.last = t.from - 1
		if t.from >= t.end {
			continue
		}
		total += t.end - t.from
		if assign[t.topic] == nil {
			assign[t.topic] = map[int32]kgo.Offset{}
		}
		assign[t.topic][t.part.Part] = kgo.NewOffset().At(t.from)
		byTP[tp{t.topic, t.part.Part}] = t
	}
	a.restore.total.Store(total)
	a.restore.done.Store(0)
	if len(byTP) == 0 {
		return nil
	}
	start := time.Now()
	a.log.Info("restoring stores from their changelogs", "partitions", len(byTP), "records", total)
	base, err := a.clientOpts()
	if err != nil {
		return err
	}
	opts := append(base, kgo.ConsumePartitions(assign), kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	if a.exactlyOnce() {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	restorers := map[*state.Engine]*state.Restorer{}
	defer func() {
		for _, r := range restorers {
			r.Close()
		}
	}()
	lastLog := time.Now()
	for len(byTP) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			a.log.Warn("restore fetch error", "topic", t, "partition", p, "err", err)
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil && fs.NumRecords() == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		var n int64
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			t := byTP[tp{r.Topic, r.Partition}]
			if t == nil || aerr != nil || r.Offset <= t.last {
				return
			}
			rs := restorers[t.part.Engine()]
			if rs == nil {
				rs = t.part.Engine().NewRestorer()
				restorers[t.part.Engine()] = rs
			}
			if r.Attrs.IsControl() {
				aerr = rs.SetOffset(t.part, r.Offset)
			} else {
				aerr = rs.Apply(t.part, r.Key, r.Value, r.Offset)
			}
			n += r.Offset - t.last
			t.last = r.Offset
			if t.last+1 >= t.end {
				delete(byTP, tp{r.Topic, r.Partition})
			}
		})
		if aerr != nil {
			return fmt.Errorf("restore: %w", aerr)
		}
		for _, rs := range restorers {
			if err := rs.Commit(); err != nil {
				return fmt.Errorf("restore: %w", err)
			}
		}
		if n > 0 {
			crashpoint.Hit(crashpoint.MidRestore)
		}
		done := a.restore.done.Add(n)
		a.metrics.restored.Add(float64(n))
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
