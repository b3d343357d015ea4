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
	const data, txnTopic, parts = "cm-data", "cm-txn", 4
	for _, topic := range []string{data, txnTopic} {
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

	// No partition holds an open transaction: the last stable offset of
	// every partition reaches its end.
	var ends kadm.ListedOffsets
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
	cons := c.Client(kgo.ConsumeTopics(txnTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	// Read until three seconds bring nothing new: every partition's last
	// stable offset is at its end, so all there is to read is there.
	got := map[int]int{}
	rctx, rcancel := context.WithTimeout(ctx, readWithin)
	defer rcancel()
	for last := time.Now(); time.Since(last) < 3*time.Second; {
		pctx, pcancel := context.WithTimeout(rctx, 500*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		if rctx.Err() != nil {
			t.Fatalf("read_committed: %s kept returning records for %v (ends %v)", txnTopic, readWithin, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var k, p, i int
			if _, err := fmt.Sscanf(string(r.Value), "t-%05d-%d-%d", &k, &p, &i); err != nil {
				t.Fatalf("unexpected record %q", r.Value)
			}
			got[k]++
			last = time.Now()
		})
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
