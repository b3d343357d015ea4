package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// txnOutcome is what the transactional loop was told of one transaction.
type txnOutcome int

const (
	txnUnknown txnOutcome = iota
	txnCommitted
	txnAborted
)

// txnLoop runs transactions of txnRecords records over every partition of
// a topic split between the groups, one after another, and remembers each
// one's outcome. A transaction whose end failed (its outcome is unknown) is
// followed by a new client of the same transactional id, whose
// InitProducerId finishes or aborts it.
type txnLoop struct {
	t     *testing.T
	c     *testcluster.Cluster
	tid   string
	topic string
	parts int32

	mu       sync.Mutex
	outcomes []txnOutcome
	errs     map[string]int

	stop, done chan struct{}
}

// txnRecords is how many records each partition gets per transaction.
const txnRecords = 3

func (l *txnLoop) client() *kgo.Client {
	return l.c.Client(kgo.TransactionalID(l.tid), kgo.TransactionTimeout(10*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(l.topic))
}

func (l *txnLoop) run() {
	defer close(l.done)
	cl := l.client()
	for k := 0; ; k++ {
		select {
		case <-l.stop:
			return
		default:
		}
		outcome, err := l.one(cl, k)
		l.mu.Lock()
		l.outcomes = append(l.outcomes, outcome)
		if err != nil {
			l.errs[err.Error()]++
		}
		l.mu.Unlock()
		if err != nil {
			cl.Close()
			cl = l.client()
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// one runs transaction k: it commits unless k is a multiple of three.
func (l *txnLoop) one(cl *kgo.Client, k int) (txnOutcome, error) {
	if err := cl.BeginTransaction(); err != nil {
		return txnUnknown, err
	}
	var recs []*kgo.Record
	for p := range l.parts {
		for i := range txnRecords {
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "t-%05d-%d-%d", k, p, i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	commit := k%3 != 0
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		commit = false // abort what may have been written
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return txnUnknown, err
	}
	if commit {
		return txnCommitted, nil
	}
	return txnAborted, nil
}

func (l *txnLoop) Stop() []txnOutcome {
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(2 * time.Minute):
		l.t.Errorf("the transactional loop did not stop within 2 minutes")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]txnOutcome(nil), l.outcomes...)
}

// TestClusterModeSurvivesFaults runs two groups of three processes in
// cluster mode under a load of acks=all producers on every partition of a
// topic split between the groups, and a loop of transactions that each
// write every partition of another split topic (their coordinator in one
// group, data in both). Meanwhile it kills each group's leader, the
// transaction coordinator's group leader, two of the three metadata voters
// at once (the metadata log has no leader for a while), and pauses a
// leader past its lease. After healing: every acknowledged record is where
// its acknowledgement said, once; every transaction is all or nothing for
// read_committed readers, as it was told (unknown outcomes either way);
// and no partition is left with an open transaction.
func TestClusterModeSurvivesFaults(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t, testcluster.WithGroups(2))
	groupsServing := func(within time.Duration) {
		t.Helper()
		c.WaitFor(within, "both groups serving with their whole ISR", func() (bool, string) {
			for g := range 2 {
				l, st := c.ServingLeaderOf(g)
				if l == nil || len(st.ISR) != 3 {
					return false, fmt.Sprintf("g%d: leader %v ISR %v", g+1, l, st.ISR)
				}
			}
			return true, ""
		})
	}
	groupsServing(electWithin)
	adm := c.Admin()
	ctx := testcluster.Context(t, 10*time.Minute)
	const data, txnTopic, out, parts = "cm-data", "cm-txn", "cm-out", 4
	for _, topic := range []string{data, txnTopic, out} {
		c.WaitFor(readWithin, "topic "+topic+" created", func() (bool, string) {
			resp, err := adm.CreateTopic(ctx, parts, -1, nil, topic)
			if err == nil {
				err = resp.Err
			}
			return err == nil || errors.Is(err, kerr.TopicAlreadyExists), fmt.Sprint(err)
		})
	}
	owners := map[int32]int{}
	c.WaitFor(readWithin, "both topics split between the groups", func() (bool, string) {
		md, err := adm.Metadata(ctx, data, txnTopic)
		if err != nil {
			return false, err.Error()
		}
		inGroup := map[string]map[int]bool{}
		for _, td := range md.Topics {
			inGroup[td.Topic] = map[int]bool{}
			for _, p := range td.Partitions {
				if p.Leader < 0 {
					return false, fmt.Sprintf("%s/%d has no leader", td.Topic, p.Partition)
				}
				g := c.Replica(int(p.Leader)).Group
				inGroup[td.Topic][g] = true
				if td.Topic == data {
					owners[p.Partition] = g
				}
			}
		}
		return len(inGroup[data]) == 2 && len(inGroup[txnTopic]) == 2, fmt.Sprint(inGroup)
	})

	var loads []*loadProducer
	for p := range int32(parts) {
		loads = append(loads, startLoad(t, c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner())),
			data, p, fmt.Sprintf("d%d", p), 20*time.Second))
	}
	loop := &txnLoop{t: t, c: c, tid: "cm-txn-loop", topic: txnTopic, parts: parts, errs: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go loop.run()
	// The loop's transactional id is coordinated in g1 and its consumer
	// group in g2: its offset commits cross groups.
	eosTxnID := c.KeyCoordinatedIn(1, "cm-eos-tx", 0)
	eosGroup := c.KeyCoordinatedIn(0, "cm-eos", 1)
	eos := startEOS(t, c, data, out, eosGroup, eosTxnID)
	for _, l := range loads {
		l.waitMore(10, readWithin)
	}

	leaderOf := func(g int) *testcluster.Replica {
		t.Helper()
		var l *testcluster.Replica
		c.WaitFor(electWithin, fmt.Sprintf("a serving leader in g%d", g+1), func() (bool, string) {
			l, _ = c.ServingLeaderOf(g)
			return l != nil, ""
		})
		return l
	}
	killAndRestart := func(what string, rs ...*testcluster.Replica) {
		t.Helper()
		for _, r := range rs {
			r.Kill()
		}
		t.Logf("killed %v (%s)", rs, what)
		time.Sleep(5 * time.Second)
		for _, r := range rs {
			r.Start()
		}
		groupsServing(isrWithin)
		for _, l := range loads {
			l.waitMore(3, readWithin)
		}
	}
	killAndRestart("g2's leader", leaderOf(1))
	// The transaction coordinator's group leader, in the middle of the
	// loop's transactions.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey = 1, loop.tid
	fcr, err := fc.RequestWith(ctx, c.Client())
	if err != nil || fcr.ErrorCode != 0 {
		t.Fatalf("FindCoordinator %s: %v %v", loop.tid, err, kerr.ErrorForCode(fcr.ErrorCode))
	}
	killAndRestart("the transaction coordinator's group leader", leaderOf(c.Replica(int(fcr.NodeID)).Group))
	// Voters 2 and 4 of 1, 2 and 4: the metadata log has no quorum, and
	// both groups lose a member (or their leader) meanwhile.
	killAndRestart("two of three metadata voters", c.Replica(2), c.Replica(4))
	killAndRestart("g1's leader", leaderOf(0))
	// A leader paused past its lease: its group fails over; resumed, it
	// must not serve what it no longer leads.
	paused := leaderOf(1)
	paused.Pause()
	t.Logf("paused %v", paused)
	time.Sleep(6 * time.Second)
	paused.Resume()
	groupsServing(isrWithin)
	for _, l := range loads {
		l.waitMore(3, readWithin)
	}

	var acked [][]ack
	for _, l := range loads {
		acked = append(acked, l.Stop())
	}
	outcomes := loop.Stop()
	t.Logf("transactions: %d, errors %v", len(outcomes), loop.errs)
	ends, err := adm.ListEndOffsets(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	// The consume-transform-produce loop catches up: its group's
	// offsets reach the end of the input.
	c.WaitFor(2*readWithin, "the transactional consumer group's offsets at the input's end", func() (bool, string) {
		offs, err := adm.FetchOffsets(ctx, eosGroup)
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := offs.Lookup(o.Topic, o.Partition); !ok || c.At != o.Offset {
				behind = append(behind, fmt.Sprintf("%d: %d of %d", o.Partition, c.At, o.Offset))
			}
		})
		if len(behind) == 0 {
			return true, ""
		}
		// What a require_stable OffsetFetch and the transaction
		// coordinator say, for the failure message.
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Version, of.Group, of.RequireStable = 7, eosGroup, true
		var stable string
		if resp, err := of.RequestWith(ctx, c.Client()); err != nil {
			stable = err.Error()
		} else {
			stable = fmt.Sprintf("code %d", resp.ErrorCode)
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					stable += fmt.Sprintf(" %s/%d=%d(%d)", rt.Topic, rp.Partition, rp.Offset, rp.ErrorCode)
				}
			}
		}
		dt := kmsg.NewPtrDescribeTransactionsRequest()
		dt.TransactionalIDs = []string{eosTxnID}
		var txs string
		if resp, err := dt.RequestWith(ctx, c.Client()); err != nil {
			txs = err.Error()
		} else {
			txs = fmt.Sprintf("%+v", resp.TransactionStates)
		}
		return false, strings.Join(behind, ", ") + "; the loop: " + eos.String() + "; stable offsets: " + stable + "; transaction: " + txs
	})
	rounds := eos.Stop()

	// Every acknowledged record at its offset, once.
	for p, as := range acked {
		recs := readPartition(t, c, data, int32(p), endOffset(as))
		at := map[int64]string{}
		seen := map[string]int{}
		for _, r := range recs {
			at[r.Offset] = string(r.Value)
			seen[string(r.Value)]++
		}
		for _, a := range as {
			if at[a.offset] != a.value {
				t.Fatalf("%s/%d (g%d): %s acknowledged at offset %d, which holds %q", data, p, owners[int32(p)]+1, a.value, a.offset, at[a.offset])
			}
			if seen[a.value] != 1 {
				t.Fatalf("%s/%d: %s is in the log %d times", data, p, a.value, seen[a.value])
			}
		}
	}

	// The consume-transform-produce loop wrote every record of the input
	// log exactly once, read_committed.
	var input []string
	ends.Each(func(o kadm.ListedOffset) {
		for _, r := range readPartition(t, c, data, o.Partition, o.Offset) {
			input = append(input, string(r.Value))
		}
	})
	output := readCommitted(t, c, ctx, out)
	for _, v := range input {
		if output["o-"+v] != 1 {
			t.Fatalf("input %s is %d times in the transactional output", v, output["o-"+v])
		}
	}
	if len(output) != len(input) {
		t.Fatalf("the transactional output holds %d distinct values for %d input records", len(output), len(input))
	}
	t.Logf("consume-transform-produce: %d records exactly once: %v", len(input), rounds)

	// No partition holds an open transaction: the last stable offset of
	// every partition reaches its end.
	c.WaitFor(readWithin, "every last stable offset at its partition's end", func() (bool, string) {
		ends, err = adm.ListEndOffsets(ctx, txnTopic)
		if err != nil {
			return false, err.Error()
		}
		stable, err := adm.ListCommittedOffsets(ctx, txnTopic)
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := stable.Lookup(o.Topic, o.Partition)
			if s.Offset != o.Offset {
				behind = append(behind, fmt.Sprintf("%d: %d of %d", o.Partition, s.Offset, o.Offset))
			}
		})
		return len(behind) == 0, strings.Join(behind, ", ")
	})

	// Each transaction all or nothing, read_committed, as it was told.
	got := map[int]int{}
	for v, n := range readCommitted(t, c, ctx, txnTopic) {
		var k, p, i int
		if _, err := fmt.Sscanf(v, "t-%05d-%d-%d", &k, &p, &i); err != nil {
			t.Fatalf("unexpected record %q", v)
		}
		got[k] += n
	}
	whole := parts * txnRecords
	committed, aborted, unknown := 0, 0, 0
	for k, o := range outcomes {
		n := got[k]
		switch {
		case n != 0 && n != whole:
			t.Fatalf("transaction %d (outcome %d): read_committed read %d of its %d records", k, o, n, whole)
		case o == txnCommitted && n != whole:
			t.Fatalf("committed transaction %d: read_committed read none of it", k)
		case o == txnAborted && n != 0:
			t.Fatalf("aborted transaction %d: read_committed read it", k)
		}
		switch o {
		case txnCommitted:
			committed++
		case txnAborted:
			aborted++
		default:
			unknown++
		}
	}
	for k := range got {
		if k >= len(outcomes) {
			t.Fatalf("read_committed read transaction %d, which the loop never ran", k)
		}
	}
	if committed == 0 {
		t.Fatal("no transaction committed")
	}
	t.Logf("transactions: %d committed, %d aborted, %d unknown; acknowledged records: %d, %d, %d, %d",
		committed, aborted, unknown, len(acked[0]), len(acked[1]), len(acked[2]), len(acked[3]))
}

// readCommitted reads topic read_committed from its start until three
// seconds bring nothing new, and counts each value. The caller has seen
// every partition's last stable offset at its end, or does not mind.
func readCommitted(t *testing.T, c *testcluster.Cluster, ctx context.Context, topic string) map[string]int {
	t.Helper()
	cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	defer cons.Close()
	got := map[string]int{}
	rctx, rcancel := context.WithTimeout(ctx, 2*readWithin)
	defer rcancel()
	for last := time.Now(); time.Since(last) < 3*time.Second; {
		pctx, pcancel := context.WithTimeout(rctx, 500*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		if rctx.Err() != nil {
			t.Fatalf("read_committed: %s kept returning records for %v", topic, 2*readWithin)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Value)]++
			last = time.Now()
		})
	}
	return got
}

// eosLoop is a consume-transform-produce loop (franz-go's
// GroupTransactSession) from one topic to another, each input record
// written once as "o-" + its value, with the group's offsets in the same
// transaction.
type eosLoop struct {
	t          *testing.T
	stop, done chan struct{}

	mu   sync.Mutex
	ok   int
	errs map[string]int
	last time.Time // when a round last committed
}

// String says how far the loop got, for a failure message.
func (l *eosLoop) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d rounds committed, the last %v ago; errors %v", l.ok, time.Since(l.last).Round(time.Second), l.errs)
}

func startEOS(t *testing.T, c *testcluster.Cluster, in, out, group, txnID string) *eosLoop {
	l := &eosLoop{t: t, stop: make(chan struct{}), done: make(chan struct{}), errs: map[string]int{}}
	session := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(c.Addrs()...), kgo.MetadataMinAge(100*time.Millisecond),
			kgo.RetryTimeout(60*time.Second), kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Second),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(), kgo.FetchMaxWait(200*time.Millisecond),
			kgo.DefaultProduceTopic(out), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Error(err)
		}
		return s
	}
	s := session()
	if s == nil {
		t.FailNow()
	}
	go func() {
		defer close(l.done)
		defer func() { s.Close() }()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := l.round(ctx, s)
			cancel()
			if err != nil {
				l.mu.Lock()
				l.errs[err.Error()]++
				l.mu.Unlock()
				// The session may be left inside a transaction it can
				// no longer end: a new one, of the same transactional
				// id, fences it (its InitProducerId finishes or aborts
				// what is open) and resumes from the committed offsets.
				s.Close()
				if s = session(); s == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-l.stop:
		default:
			close(l.stop)
		}
	})
	return l
}

// round polls, writes what it got and ends the transaction: committed
// when the writes went through, aborted otherwise (the session then
// rewinds to the committed offsets).
func (l *eosLoop) round(ctx context.Context, s *kgo.GroupTransactSession) error {
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	fs := s.PollFetches(pctx)
	pcancel()
	if err := s.Begin(); err != nil {
		return err
	}
	var recs []*kgo.Record
	fs.EachRecord(func(r *kgo.Record) {
		recs = append(recs, &kgo.Record{Partition: r.Partition, Value: append([]byte("o-"), r.Value...)})
	})
	try := kgo.TryCommit
	var perr error
	if len(recs) > 0 {
		if perr = s.ProduceSync(ctx, recs...).FirstErr(); perr != nil {
			try = kgo.TryAbort
		}
	}
	committed, err := s.End(ctx, try)
	switch {
	case err != nil:
		return err
	case perr != nil:
		return perr
	case committed:
		l.mu.Lock()
		l.ok++
		l.last = time.Now()
		l.mu.Unlock()
	}
	return nil
}

// Stop ends the loop and returns it, with how many rounds committed.
func (l *eosLoop) Stop() *eosLoop {
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(2 * time.Minute):
		l.t.Errorf("the consume-transform-produce loop did not stop within 2 minutes")
	}
	return l
}
