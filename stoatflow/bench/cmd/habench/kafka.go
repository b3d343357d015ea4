package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		md, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := md[topic]; ok && d.Err == nil && len(d.Partitions) == partitions {
				ok := true
				for _, p := range d.Partitions {
					ok = ok && p.Err == nil && p.Leader >= 0
				}
				if ok {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// vocabulary is n distinct lower-case words of 5-10 letters, the same for
// a seed.
func vocabulary(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	var sb strings.Builder
	for len(out) < n {
		sb.Reset()
		l := 5 + rng.IntN(6)
		for range l {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		w := sb.String()
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// bigWord is distinct word i of the large-state preload, size characters
// (at least 32): "z" + 15 hex digits of i + 16 hex digits of a hash of i,
// then of (i, 1), (i, 2), ... for a longer word, so that the store does
// not compress it away (the vocabulary has no digits, so these never
// collide with it). Longer words reach a large store with fewer records.
func bigWord(i int64, size int) string {
	w := fmt.Sprintf("z%015x", i)
	var b [16]byte
	for k := int64(0); len(w) < size; k++ {
		h := fnv.New64a()
		for j := range 8 {
			b[j], b[8+j] = byte(i>>(8*j)), byte(k>>(8*j))
		}
		if k == 0 {
			h.Write(b[:8]) // the 32-character words of earlier runs
		} else {
			h.Write(b[:])
		}
		w += fmt.Sprintf("%016x", h.Sum64())
	}
	return w[:size]
}

func newProducer(addr string, extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(100000),
		kgo.RecordRetries(20)}, extra...)...)
}

// produceLines writes lines (random keys) to topic and waits until all are
// acknowledged.
func produceLines(ctx context.Context, cl *kgo.Client, topic string, lines []string, rng *rand.Rand) error {
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for _, l := range lines {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(rng.IntN(1 << 20))), Value: []byte(l)}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return e
	}
	return nil
}

// feeder produces lines of words drawn uniformly from a vocabulary at a
// steady rate, each record's timestamp set when it is made (the output
// records carry their input's timestamp, which is how the failover time
// knows which outputs come from input produced after a fault).
type feeder struct {
	cl     *kgo.Client
	topic  string
	stop   chan struct{}
	done   sync.WaitGroup
	sent   atomic.Int64
	failed atomic.Int64
}

func startFeeder(addr, topic string, vocab []string, rate, wordsPerLine int, seed uint64) (*feeder, error) {
	cl, err := newProducer(addr)
	if err != nil {
		return nil, err
	}
	f := &feeder{cl: cl, topic: topic, stop: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, 3))
	const tick = 10 * time.Millisecond
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		start := time.Now()
		var made int64
		var sb strings.Builder
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
			}
			// Catch up to the rate from the start, so that a late tick
			// (a loaded machine) does not lower it.
			due := int64(time.Since(start).Seconds() * float64(rate))
			for ; made < due; made++ {
				sb.Reset()
				for w := range wordsPerLine {
					if w > 0 {
						sb.WriteByte(' ')
					}
					sb.WriteString(vocab[rng.IntN(len(vocab))])
				}
				r := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(rng.IntN(1 << 20))), Value: []byte(sb.String()), Timestamp: time.Now()}
				f.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
					if err != nil {
						f.failed.Add(1)
					} else {
						f.sent.Add(1)
					}
				})
			}
		}
	}()
	return f, nil
}

func (f *feeder) Stop() {
	close(f.stop)
	f.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f.cl.Flush(ctx)
	cancel()
	f.cl.Close()
}

// watcher reads an output topic read_committed from its end, all the
// time, and keeps one entry per fetch that returned records: when it
// became visible here and the largest record timestamp per partition.
type watcher struct {
	cl     *kgo.Client
	topic  string
	nparts int
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	polls   []poll
	records int64
}

type poll struct {
	at    time.Time
	n     int
	maxTs []int64 // per partition, unix ms; 0 where the fetch had none
	all   int64   // the largest over partitions
}

func startWatcher(addr, topic string, nparts int) (*watcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.MetadataMinAge(time.Second))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cl: cl, topic: topic, nparts: nparts, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			at := time.Now()
			p := poll{at: at, maxTs: make([]int64, nparts)}
			fs.EachRecord(func(r *kgo.Record) {
				p.n++
				ts := r.Timestamp.UnixMilli()
				if int(r.Partition) < nparts && ts > p.maxTs[r.Partition] {
					p.maxTs[r.Partition] = ts
				}
				if ts > p.all {
					p.all = ts
				}
			})
			if p.n > 0 {
				w.mu.Lock()
				w.polls = append(w.polls, p)
				w.records += int64(p.n)
				w.mu.Unlock()
			}
		}
	}()
	return w, nil
}

func (w *watcher) Close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// firstAfter is the first fetch after from whose records include one, on
// any of parts (nil: any partition), with a timestamp above ts (unix ms).
func (w *watcher) firstAfter(from time.Time, ts int64, parts []int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.polls {
		if p.at.Before(from) {
			continue
		}
		if parts == nil {
			if p.all > ts {
				return p.at, true
			}
			continue
		}
		for _, q := range parts {
			if q < len(p.maxTs) && p.maxTs[q] > ts {
				return p.at, true
			}
		}
	}
	return time.Time{}, false
}

// allAfter is the first moment every partition of parts has shown a
// record with a timestamp above ts in a fetch after from.
func (w *watcher) allAfter(from time.Time, ts int64, parts []int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[int]bool{}
	for _, p := range w.polls {
		if p.at.Before(from) {
			continue
		}
		for _, q := range parts {
			if q < len(p.maxTs) && p.maxTs[q] > ts {
				seen[q] = true
			}
		}
		if len(seen) == len(parts) {
			return p.at, true
		}
	}
	return time.Time{}, false
}

// maxGap is the longest time between two consecutive fetches that
// returned records, among those that end in (from, to]; the gap that
// straddles from counts (it starts at the last fetch before from).
func (w *watcher) maxGap(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var worst time.Duration
	var prev time.Time
	for _, p := range w.polls {
		if p.at.After(to) {
			break
		}
		if p.at.After(from) && !prev.IsZero() {
			if d := p.at.Sub(prev); d > worst {
				worst = d
			}
		}
		prev = p.at
	}
	// Nothing from the last fetch until to is a gap too.
	if !prev.IsZero() && to.Sub(prev) > worst {
		worst = to.Sub(prev)
	}
	return worst
}

// lastAt is when the latest fetch with records arrived.
func (w *watcher) lastAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.polls) == 0 {
		return time.Time{}
	}
	return w.polls[len(w.polls)-1].at
}

// behind is how old the newest input behind the output seen so far is
// (now minus the largest record timestamp of the latest fetch): large
// when output stopped, when the feeder stalls, or when this consumer
// lags behind the topic (as after a preload that wrote millions of
// output records). Every fault waits until it is small, so that the
// first output after the fault is seen when it becomes visible.
func (w *watcher) behind() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.polls) == 0 {
		return time.Hour
	}
	return time.Since(time.UnixMilli(w.polls[len(w.polls)-1].all))
}

// fresh says whether output arrived within the last second and its input
// was at most 2 s old.
func (w *watcher) fresh() (bool, string) {
	last, behind := time.Since(w.lastAt()), w.behind()
	return last < time.Second && behind < 2*time.Second,
		fmt.Sprintf("last output %v ago, its newest input %v old", last.Round(time.Millisecond), behind.Round(time.Millisecond))
}

func (w *watcher) count() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.records
}

// trim drops entries older than keep, so that a long run does not grow
// without bound.
func (w *watcher) trim(keep time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := time.Now().Add(-keep)
	i := 0
	for i < len(w.polls) && w.polls[i].at.Before(cut) {
		i++
	}
	w.polls = append([]poll(nil), w.polls[i:]...)
}

// inputLag is how far group's committed positions are behind the end of
// topic, summed over its partitions.
func inputLag(ctx context.Context, adm *kadm.Client, group, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		got := int64(0)
		if r, ok := offs.Lookup(o.Topic, o.Partition); ok && r.Err == nil && r.At >= 0 {
			got = r.At
		}
		lag += o.Offset - got
	})
	return lag, ferr
}

// waitConsumed waits until group's committed positions are at most slack
// records behind the end of topic (slack: what the feeder writes while
// the application works, when it runs).
func waitConsumed(adm *kadm.Client, group, topic string, slack int64, within time.Duration, label string) error {
	deadline := time.Now().Add(within)
	last := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lag, err := inputLag(ctx, adm, group, topic)
		cancel()
		if err == nil && lag <= slack {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: group %s still %d records behind %s after %v (%v)", label, group, lag, topic, within, err)
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			progressf("[%s] %s is %d records behind on %s", label, group, lag, topic)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
