package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/checker"
)

// workload runs the clients of a run: acks=all idempotent producers,
// a transactional producer, assign-mode consumers under both isolation
// levels, a consumer group that commits offsets, and a reader of the
// group's committed offsets. Every operation goes to the recorder.
type workload struct {
	cfg   *Config
	seeds []string
	rec   *recorder
	// topics: data (plain producers) and txn (the transactional
	// producer); consumers read both.
	data, txn string
	dataParts int32
	txnParts  int32
	group     string

	ctx    context.Context
	cancel context.CancelFunc
	// producing ends before consuming: the final drain reads what the
	// producers left.
	prodCtx    context.Context
	prodCancel context.CancelFunc
	prodWG     sync.WaitGroup
	consWG     sync.WaitGroup

	mu      sync.Mutex
	clients []*kgo.Client
	logf    func(format string, args ...any)
}

func (w *workload) client(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(w.seeds...),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.RequestTimeoutOverhead(5 * time.Second),
		kgo.ConnIdleTimeout(20 * time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.clients = append(w.clients, cl)
	w.mu.Unlock()
	return cl, nil
}

func (w *workload) closeAll() {
	w.mu.Lock()
	cls := w.clients
	w.clients = nil
	w.mu.Unlock()
	for _, cl := range cls {
		cl.Close()
	}
}

// start launches every client.
func (w *workload) start(seed int64) error {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.prodCtx, w.prodCancel = context.WithCancel(w.ctx)
	for i := range w.cfg.Producers {
		cl, err := w.client(
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RecordDeliveryTimeout(15*time.Second),
			kgo.ProduceRequestTimeout(6*time.Second),
			kgo.ProducerLinger(2*time.Millisecond),
		)
		if err != nil {
			return err
		}
		w.prodWG.Add(1)
		go w.produce(cl, fmt.Sprintf("p%d", i+1), rand.New(rand.NewPCG(uint64(seed), uint64(i+1))))
	}
	if !w.cfg.NoTxn {
		w.prodWG.Add(1)
		go w.transact(seed)
	}
	for _, rc := range []bool{false, true} {
		name := "assign-ru"
		iso := kgo.ReadUncommitted()
		if rc {
			name, iso = "assign-rc", kgo.ReadCommitted()
		}
		cl, err := w.client(kgo.ConsumePartitions(w.allFromZero()), kgo.FetchIsolationLevel(iso),
			kgo.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			return err
		}
		w.consWG.Add(1)
		go w.consume(cl, name, checker.Assign, rc, nil, "")
	}
	// Two members of a classic group and two of a KIP-848 group (the
	// broker assigns their partitions).
	for i := range 4 {
		att := &commitAttempts{}
		group, name, opts := w.group, fmt.Sprintf("group-%d", i+1), []kgo.Opt{kgo.WithHooks(att)}
		if i >= 2 {
			group, name = w.group848(), fmt.Sprintf("kip848-%d", i-1)
			opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
		}
		cl, err := w.client(append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(w.data, w.txn),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(300*time.Millisecond),
			kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(time.Second),
			kgo.RebalanceTimeout(10*time.Second))...)
		if err != nil {
			return err
		}
		w.consWG.Add(1)
		go w.consume(cl, name, checker.Group, true, &committer{cl, att}, group)
	}
	adm, err := w.client()
	if err != nil {
		return err
	}
	w.consWG.Add(1)
	go w.fetchOffsets(kadm.NewClient(adm))
	return nil
}

// group848 is the KIP-848 consumer group's id.
func (w *workload) group848() string { return w.group + "-848" }

func (w *workload) allFromZero() map[string]map[int32]kgo.Offset {
	m := map[string]map[int32]kgo.Offset{w.data: {}, w.txn: {}}
	for p := range w.dataParts {
		m[w.data][p] = kgo.NewOffset().At(0)
	}
	for p := range w.txnParts {
		m[w.txn][p] = kgo.NewOffset().At(0)
	}
	return m
}

// produce sends unique values to random partitions at the configured
// rate, with at most a few records in flight.
func (w *workload) produce(cl *kgo.Client, name string, rng *rand.Rand) {
	defer w.prodWG.Done()
	inflight := make(chan struct{}, 8)
	var wg sync.WaitGroup
	defer wg.Wait()
	gap := time.Second / time.Duration(max(w.cfg.Rate, 1))
	next := time.Now()
	for seq := 0; ; seq++ {
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-w.prodCtx.Done():
				return
			}
		}
		next = next.Add(gap)
		if time.Until(next) < -time.Second {
			// Behind after a stall: do not burst to catch up.
			next = time.Now()
		}
		select {
		case inflight <- struct{}{}:
		case <-w.prodCtx.Done():
			return
		}
		part := rng.Int32N(w.dataParts)
		v := fmt.Sprintf("%s-%07d", name, seq)
		i := w.rec.startSend(checker.Send{Producer: name, Seq: seq, Topic: w.data, Partition: part, Value: v})
		wg.Add(1)
		// The client's own context, not the run's: ending the run must
		// not turn a record that may be in flight into a failure.
		cl.Produce(context.Background(), &kgo.Record{Topic: w.data, Partition: part, Value: []byte(v)}, func(r *kgo.Record, err error) {
			w.rec.endSend(i, r.Offset, err)
			<-inflight
			wg.Done()
		})
	}
}

// transact runs transactions of one to five records on the txn topic,
// committing most and aborting some. A transaction whose end is not
// confirmed leaves its sends' fate unknown, and the client is replaced
// (its successor's InitProducerID fences and aborts what is left).
func (w *workload) transact(seed int64) {
	defer w.prodWG.Done()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7478))
	const name = "txp"
	newClient := func() *kgo.Client {
		for {
			cl, err := w.client(kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Second),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordDeliveryTimeout(15*time.Second),
				kgo.ProduceRequestTimeout(6*time.Second))
			if err == nil {
				return cl
			}
			select {
			case <-time.After(time.Second):
			case <-w.prodCtx.Done():
				return nil
			}
		}
	}
	cl := newClient()
	seq := 0
	for n := 0; cl != nil; n++ {
		select {
		case <-w.prodCtx.Done():
			return
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		}
		if err := cl.BeginTransaction(); err != nil {
			w.rec.countErr("begin transaction", err)
			cl.Close()
			cl = newClient()
			continue
		}
		txn := fmt.Sprintf("t%05d", n)
		var idx []int
		ok := true
		for j := range 1 + rng.IntN(5) {
			part := rng.Int32N(w.txnParts)
			v := fmt.Sprintf("%s-%s-%d", name, txn, j)
			i := w.rec.startSend(checker.Send{Producer: name, Seq: seq, Topic: w.txn, Partition: part, Value: v, Txn: txn})
			seq++
			idx = append(idx, i)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: w.txn, Partition: part, Value: []byte(v)}).First()
			cancel()
			off := int64(-1)
			if r != nil {
				off = r.Offset
			}
			w.rec.endSend(i, off, err)
			if err != nil {
				ok = false
				break
			}
		}
		commit := ok && rng.Float64() < 0.7
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if !ok {
			_ = cl.AbortBufferedRecords(ctx)
		}
		err := cl.EndTransaction(ctx, end)
		cancel()
		switch {
		case err == nil && commit:
			w.rec.endTxn(idx, checker.TxnCommitted)
		case err == nil:
			w.rec.endTxn(idx, checker.TxnAborted)
		default:
			w.rec.countErr("end transaction", err)
			cl.Close()
			cl = newClient()
		}
	}
}

// consume polls until the run ends, recording every fetched partition
// with records. A member of group (commit != nil) commits what each poll
// returned and records the commit.
func (w *workload) consume(cl *kgo.Client, name string, mode checker.Mode, rc bool, commit *committer, group string) {
	defer w.consWG.Done()
	for w.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(w.ctx, time.Second)
		start := w.rec.now()
		fs := cl.PollFetches(ctx)
		cancel()
		end := w.rec.now()
		offsets := map[string]map[int32]kgo.EpochOffset{}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				w.rec.fetchErr(name, err)
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			w.rec.pollFromFetch(p, name, mode, rc, start, end)
			last := p.Records[len(p.Records)-1]
			if offsets[p.Topic] == nil {
				offsets[p.Topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		})
		if commit != nil && len(offsets) > 0 {
			w.commit(commit, group, offsets)
		}
	}
}

// committer is a group member's client and the count of the OffsetCommit
// requests it writes.
type committer struct {
	cl  *kgo.Client
	att *commitAttempts
}

// commitAttempts counts a client's OffsetCommit requests and where they
// went. franz-go retries a commit by itself (after NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, a lost connection, STALE_MEMBER_EPOCH) and
// hands the callback only the last answer, so the count is what tells a
// commit refused outright from one refused on a retry after an attempt
// whose fate nobody learned. A member commits one request at a time
// (CommitOffsetsSync, from its one consuming goroutine), so the requests
// written between a commit's start and its callback are that commit's.
type commitAttempts struct {
	mu      sync.Mutex
	brokers []int32
}

var _ kgo.HookBrokerWrite = (*commitAttempts)(nil)

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (a *commitAttempts) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != int16(kmsg.OffsetCommit) {
		return
	}
	a.mu.Lock()
	// A write that failed may still have sent the request whole.
	a.brokers = append(a.brokers, meta.NodeID)
	a.mu.Unlock()
}

// take returns and forgets the requests written since the last take.
func (a *commitAttempts) take() []int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.brokers
	a.brokers = nil
	return b
}

// commit commits offsets synchronously and records each partition's
// outcome. Errors a coordinator returns before writing anything (a stale
// generation or member, a rebalance) are failures when they answer the
// only request written; after a retry they are unknown outcomes, since an
// earlier attempt may have been written with its answer lost. Every other
// error is an unknown outcome.
func (w *workload) commit(c *committer, group string, offsets map[string]map[int32]kgo.EpochOffset) {
	start := w.rec.now()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	c.att.take()
	member, _ := c.cl.GroupMetadata()
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		end := w.rec.now()
		via := c.att.take()
		known := map[string]map[int32]int16{}
		if err == nil && resp != nil {
			for _, t := range resp.Topics {
				known[t.Topic] = map[int32]int16{}
				for _, p := range t.Partitions {
					known[t.Topic][p.Partition] = p.ErrorCode
				}
			}
		} else if err != nil {
			w.rec.countErr("commit", err)
		}
		for t, ps := range offsets {
			for p, eo := range ps {
				out := checker.Unknown
				if code, ok := known[t][p]; ok {
					out = commitOutcome(code, len(via))
					if err := kerr.ErrorForCode(code); err != nil && !refusal(err) {
						w.rec.countErr("commit", err)
					}
				}
				w.rec.addCommit(checker.OffsetCommit{Group: group, Topic: t, Partition: p, Offset: eo.Offset,
					Start: start, End: end, Outcome: out, Attempts: len(via), Brokers: via, Member: member})
			}
		}
	})
}

// refusal reports whether a commit answer says the coordinator wrote
// nothing: the member's generation, id, epoch or instance is not the
// current one, or the group is rebalancing.
func refusal(err error) bool {
	switch err {
	case kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.FencedInstanceID,
		kerr.StaleMemberEpoch, kerr.FencedMemberEpoch:
		return true
	}
	return false
}

// commitOutcome is what a partition's commit answer code, after attempts
// requests, tells of its fate. Success is an acknowledgement. A refusal is
// a failure only if it answered the one request written: after a retry it
// says nothing of the earlier attempts, one of which may have been written
// (its leader appended it, replicated it and stepped down before it knew,
// answering NOT_COORDINATOR; the next leader kept it). Any other answer
// is unknown.
func commitOutcome(code int16, attempts int) checker.Outcome {
	err := kerr.ErrorForCode(code)
	switch {
	case err == nil:
		return checker.Acked
	case refusal(err) && attempts <= 1:
		return checker.Failed
	}
	return checker.Unknown
}

// fetchOffsets reads both groups' committed offsets every half second.
func (w *workload) fetchOffsets(adm *kadm.Client) {
	defer w.consWG.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for _, group := range []string{w.group, w.group848()} {
			start := w.rec.now()
			ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
			resp, err := adm.FetchOffsets(ctx, group)
			cancel()
			end := w.rec.now()
			if err != nil {
				continue
			}
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Err != nil {
					return
				}
				w.rec.addFetch(checker.OffsetFetch{Group: group, Topic: o.Topic, Partition: o.Partition, Offset: o.At,
					Start: start, End: end})
			})
		}
	}
}

// stopProducing ends every producer and waits (bounded) for the answers
// of records in flight; what never gets one stays unknown.
func (w *workload) stopProducing(within time.Duration) {
	w.prodCancel()
	done := make(chan struct{})
	go func() { w.prodWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		w.logf("chaos: producers still waiting for answers after %v; their records stay unknown", within)
	}
}

// stop ends every client.
func (w *workload) stop() {
	w.cancel()
	done := make(chan struct{})
	go func() { w.consWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.logf("chaos: consumers did not stop within 30 s")
	}
	w.closeAll()
}
