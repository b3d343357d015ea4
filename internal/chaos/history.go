package chaos

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/checker"
)

// recorder collects every client operation of a run into a
// checker.History. Times are nanoseconds since the run began.
type recorder struct {
	t0 time.Time

	mu    sync.Mutex
	sends []checker.Send
	polls []checker.Poll
	// pollEpochs holds, for each poll, the leader epoch of each record's
	// batch (the checker's records carry none).
	pollEpochs [][]int32
	commits    []checker.OffsetCommit
	fetches    []checker.OffsetFetch
	// ended marks the sends whose End is known; the others are closed as
	// unknown outcomes at the end of the run.
	ended []bool
	// errs counts the errors clients saw, by message, for the report.
	errs map[string]int
	// dataLoss keeps, in full, every data-loss notice a consumer got
	// (franz-go's ErrDataLoss: the broker's OffsetForLeaderEpoch answer
	// made it rewind): evidence beside the polls that show the rewind.
	dataLoss []lossNotice
}

// lossNotice is one data-loss notice a consumer got: its client was told
// (by an OffsetForLeaderEpoch answer) that records from ResetTo up to
// ConsumedTo were gone, and rewound to ResetTo.
type lossNotice struct {
	At                  int64
	Consumer            string
	Topic               string
	Partition           int32
	ConsumedTo, ResetTo int64
	Text                string
}

func newRecorder(t0 time.Time) *recorder {
	return &recorder{t0: t0, errs: map[string]int{}}
}

func (r *recorder) now() int64 { return time.Since(r.t0).Nanoseconds() }

// startSend records a send before it is issued and returns its index.
func (r *recorder) startSend(s checker.Send) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Start = r.now()
	s.End = s.Start
	s.Outcome = checker.Unknown
	r.sends = append(r.sends, s)
	r.ended = append(r.ended, false)
	return len(r.sends) - 1
}

// endSend records what the producer learned: err nil is an
// acknowledgement at offset; any error is an unknown outcome, because a
// produce that timed out or lost its connection may still have been
// appended (and with retries, even a definite-looking last error may
// follow an attempt that landed).
func (r *recorder) endSend(i int, offset int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.sends[i]
	s.End = r.now()
	r.ended[i] = true
	if err == nil {
		s.Outcome, s.Offset = checker.Acked, offset
		return
	}
	r.errs["produce: "+errKey(err)]++
}

// endTxn sets the fate of the transaction's sends.
func (r *recorder) endTxn(idx []int, o checker.TxnOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range idx {
		r.sends[i].TxnOutcome = o
	}
}

func (r *recorder) addPoll(p checker.Poll, epochs []int32) {
	r.mu.Lock()
	r.polls = append(r.polls, p)
	r.pollEpochs = append(r.pollEpochs, epochs)
	r.mu.Unlock()
}

// pollFromFetch records one fetched partition's records; start and end
// bound the PollFetches call.
func (r *recorder) pollFromFetch(p kgo.FetchTopicPartition, consumer string, mode checker.Mode, rc bool, start, end int64) {
	recs := make([]checker.Record, len(p.Records))
	epochs := make([]int32, len(p.Records))
	for i, rec := range p.Records {
		recs[i] = checker.Record{Offset: rec.Offset, Value: string(rec.Value)}
		epochs[i] = rec.LeaderEpoch
	}
	r.addPoll(checker.Poll{Consumer: consumer, Mode: mode, ReadCommitted: rc, Topic: p.Topic, Partition: p.Partition,
		Records: recs, Start: start, End: end, HW: p.HighWatermark}, epochs)
}

func (r *recorder) epochsCopy() [][]int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int32(nil), r.pollEpochs...)
}

func (r *recorder) addCommit(c checker.OffsetCommit) {
	r.mu.Lock()
	r.commits = append(r.commits, c)
	r.mu.Unlock()
}

func (r *recorder) addFetch(f checker.OffsetFetch) {
	r.mu.Lock()
	r.fetches = append(r.fetches, f)
	r.mu.Unlock()
}

// fetchErr counts a consumer's fetch error, keeping data-loss notices in
// full.
func (r *recorder) fetchErr(consumer string, err error) {
	if dl, ok := errors.AsType[*kgo.ErrDataLoss](err); ok {
		r.mu.Lock()
		at := r.now()
		r.dataLoss = append(r.dataLoss, lossNotice{At: at, Consumer: consumer, Topic: dl.Topic, Partition: dl.Partition,
			ConsumedTo: dl.ConsumedTo, ResetTo: dl.ResetTo, Text: fmt.Sprintf("t=%d %s: %v", at, consumer, dl)})
		r.mu.Unlock()
	}
	r.countErr("fetch", err)
}

func (r *recorder) dataLossCopy() []lossNotice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lossNotice(nil), r.dataLoss...)
}

func (r *recorder) countErr(what string, err error) {
	r.mu.Lock()
	r.errs[what+": "+errKey(err)]++
	r.mu.Unlock()
}

// counts returns the sends so far by outcome, and the number of polled
// records.
func (r *recorder) counts() (acked, unknown, pending, polled int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.sends {
		switch {
		case !r.ended[i]:
			pending++
		case r.sends[i].Outcome == checker.Acked:
			acked++
		default:
			unknown++
		}
	}
	for i := range r.polls {
		polled += len(r.polls[i].Records)
	}
	return
}

// history closes sends that never ended (their outcome stays unknown,
// with the run's end as their end) and returns the whole history.
func (r *recorder) history() checker.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now()
	for i := range r.sends {
		if !r.ended[i] {
			r.sends[i].End = end
			r.ended[i] = true
		}
	}
	return checker.History{
		Sends:         append([]checker.Send(nil), r.sends...),
		Polls:         append([]checker.Poll(nil), r.polls...),
		Commits:       append([]checker.OffsetCommit(nil), r.commits...),
		OffsetFetches: append([]checker.OffsetFetch(nil), r.fetches...),
	}
}

func (r *recorder) errCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.errs))
	for k, v := range r.errs {
		out[k] = v
	}
	return out
}

// errKey shortens an error to something worth counting: the same failure
// on different records or addresses counts as one kind.
func errKey(err error) string {
	s := digits.ReplaceAllString(err.Error(), "N")
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

var digits = regexp.MustCompile(`[0-9]+`)
