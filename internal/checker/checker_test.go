package checker

import (
	"strings"
	"testing"
)

const topic = "t"

func ack(producer string, seq int, value string, off, start, end int64) Send {
	return Send{Producer: producer, Seq: seq, Topic: topic, Value: value, Start: start, End: end, Outcome: Acked, Offset: off}
}

func recs(kv ...any) []Record {
	var out []Record
	for i := 0; i < len(kv); i += 2 {
		off := int64(kv[i].(int))
		if kv[i+1] == nil {
			out = append(out, Record{Offset: off, Control: true})
			continue
		}
		out = append(out, Record{Offset: off, Value: kv[i+1].(string)})
	}
	return out
}

func poll(consumer string, start, end, hw int64, rs []Record) Poll {
	return Poll{Consumer: consumer, Topic: topic, Records: rs, Start: start, End: end, HW: hw}
}

func dump(replica string, leader bool, hw int64, rs []Record) Dump {
	return Dump{Replica: replica, Topic: topic, Records: rs, HW: hw, Leader: leader}
}

// base is a clean history: three acknowledged sends read in two polls and
// held by two replicas.
func base() History {
	return History{
		Sends: []Send{ack("p1", 1, "a", 0, 0, 1), ack("p1", 2, "b", 1, 2, 3), ack("p2", 1, "c", 2, 4, 5)},
		Polls: []Poll{
			poll("c1", 6, 7, 3, recs(0, "a", 1, "b")),
			poll("c1", 8, 9, 3, recs(2, "c")),
		},
		Dumps: []Dump{
			dump("r1", true, 3, recs(0, "a", 1, "b", 2, "c")),
			dump("r2", false, 3, recs(0, "a", 1, "b", 2, "c")),
		},
	}
}

func txnHistory(rcPoll []Record) History {
	a := ack("p1", 1, "a", 0, 0, 1)
	a.Txn, a.TxnOutcome = "T1", TxnAborted
	b := ack("p1", 2, "b", 2, 2, 3)
	b.Txn, b.TxnOutcome = "T2", TxnCommitted
	log := recs(0, "a", 1, nil, 2, "b", 3, nil)
	rc := poll("c1", 4, 5, 4, rcPoll)
	rc.ReadCommitted = true
	return History{
		Sends: []Send{a, b},
		Polls: []Poll{rc, poll("c2", 4, 5, 4, recs(0, "a", 2, "b"))},
		Dumps: []Dump{dump("r1", true, 4, log), dump("r2", false, 4, log)},
	}
}

func TestKinds(t *testing.T) {
	type tc struct {
		kind      Kind
		bad, good func() History
		opt       Options
	}
	cases := []tc{
		{InconsistentOffset, func() History {
			h := base()
			h.Sends[1].Offset = 0
			return h
		}, base, Options{}},
		{Duplicate, func() History {
			h := base()
			h.Dumps[0].Records = append(h.Dumps[0].Records, Record{Offset: 3, Value: "a"})
			h.Dumps[0].HW = 4
			return h
		}, base, Options{}},
		{LostWrite, func() History {
			h := base()
			h.Polls[0].Records = recs(0, "a")
			for i := range h.Dumps {
				h.Dumps[i].Records = recs(0, "a", 2, "c")
			}
			return h
		}, base, Options{}},
		{Unseen, func() History {
			h := base()
			h.Polls = h.Polls[:1]
			h.Dumps[0].Records = recs(0, "a", 1, "b")
			h.Dumps[0].HW = 2
			return h
		}, base, Options{}},
		{Unexpected, func() History {
			h := base()
			h.Sends = h.Sends[:2]
			return h
		}, base, Options{}},
		{AbortedRead, func() History { return txnHistory(recs(0, "a", 2, "b")) },
			func() History { return txnHistory(recs(2, "b")) }, Options{}},
		{AbortedRead, func() History {
			h := base()
			h.Sends[1].Outcome = Failed
			return h
		}, base, Options{}},
		{NonMonotonicPoll, func() History {
			h := base()
			h.Polls[0].Records = recs(1, "b", 0, "a")
			return h
		}, base, Options{}},
		{NonMonotonicPoll, func() History {
			h := base()
			h.Polls[1].Records = recs(1, "b", 2, "c")
			return h
		}, base, Options{}},
		{PollSkip, func() History {
			h := base()
			h.Polls[0].Records = recs(0, "a")
			return h
		}, base, Options{}},
		{PollSkip, func() History {
			h := base()
			h.Polls = []Poll{poll("c1", 6, 7, 3, recs(0, "a", 2, "c"))}
			return h
		}, base, Options{}},
		{NonMonotonicSend, func() History {
			h := base()
			h.Sends[0].Offset, h.Sends[1].Offset = 1, 0
			h.Sends[0].End, h.Sends[1].Start = 3, 0 // concurrent: not a real-time violation
			return h
		}, func() History {
			h := base()
			h.Sends[0].End, h.Sends[1].Start = 3, 0
			return h
		}, Options{}},
		{RealTimeOrder, func() History {
			h := base()
			h.Sends[1].Offset, h.Sends[2].Offset = 2, 1
			return h
		}, base, Options{}},
		{TruncatedRead, func() History {
			h := base()
			h.Dumps[0].Records = recs(0, "a", 1, "b")
			h.Dumps[0].HW = 2
			h.Dumps[1].Records = recs(0, "a", 1, "b")
			h.Dumps[1].HW = 2
			return h
		}, base, Options{}},
		{ReadPastHW, func() History {
			h := base()
			h.Polls[0].HW = 1
			return h
		}, base, Options{}},
		{ReplicaDivergence, func() History {
			h := base()
			h.Dumps[1].Records = recs(0, "a", 1, nil, 2, "c")
			return h
		}, func() History {
			h := base()
			// A follower may lag, and may diverge above the high watermark.
			h.Dumps = append(h.Dumps, dump("r3", false, 1, recs(0, "a")))
			h.Dumps[0].HW, h.Dumps[1].HW = 2, 2
			h.Dumps[1].Records = recs(0, "a", 1, "b", 2, "c", 3, "zz")
			h.Sends = append(h.Sends, Send{Producer: "p3", Topic: topic, Value: "zz", Outcome: Unknown, Start: 0, End: 9})
			return h
		}, Options{}},
		{UnderReplicated, func() History {
			h := base()
			h.Dumps[1].Records = recs(0, "a", 1, "b")
			h.Dumps[1].HW = 2
			return h
		}, base, Options{MinISR: 2}},
	}
	for _, c := range cases {
		t.Run(string(c.kind), func(t *testing.T) {
			if r := Check(c.good(), c.opt); !r.OK() {
				t.Fatalf("clean history reported anomalies:\n%s", r)
			}
			r := Check(c.bad(), c.opt)
			if !r.Has(c.kind) {
				t.Fatalf("want %s, got:\n%s", c.kind, r)
			}
			if !strings.Contains(r.String(), string(c.kind)) {
				t.Fatalf("String lacks %s:\n%s", c.kind, r)
			}
			for _, a := range r.Anomalies {
				if len(a.Witness) == 0 {
					t.Fatalf("anomaly without witness: %+v", a)
				}
			}
		})
	}
}

func groupHistory(fetched int64) History {
	return History{
		Commits: []OffsetCommit{
			{Group: "g", Topic: topic, Offset: 5, Start: 0, End: 1, Outcome: Acked},
			{Group: "g", Topic: topic, Offset: 10, Start: 2, End: 3, Outcome: Acked},
			{Group: "g", Topic: topic, Offset: 99, Start: 2, End: 3, Outcome: Failed},
			{Group: "g", Topic: topic, Offset: 12, Start: 20, End: 21, Outcome: Unknown},
		},
		OffsetFetches: []OffsetFetch{
			{Group: "g", Topic: topic, Offset: -1, Start: 0, End: 0},
			{Group: "g", Topic: topic, Offset: 5, Start: 2, End: 5},    // concurrent with the commit of 10
			{Group: "g", Topic: topic, Offset: 12, Start: 30, End: 31}, // unknown commit took effect
			{Group: "g", Topic: topic, Offset: fetched, Start: 4, End: 5},
		},
	}
}

func TestCommittedOffsets(t *testing.T) {
	if r := Check(groupHistory(10), Options{}); !r.OK() {
		t.Fatalf("clean history reported anomalies:\n%s", r)
	}
	for _, bad := range []int64{5, -1, 99, 12, 7} {
		r := Check(groupHistory(bad), Options{})
		if r.Counts[CommittedOffsetRegression] != 1 {
			t.Fatalf("fetch of %d: want one %s, got:\n%s", bad, CommittedOffsetRegression, r)
		}
	}
}

// TestRefusedCommitWritten: a refused commit found in the final
// __consumer_offsets (same group, partition, offset and member) is an
// anomaly; the same record is none when a commit of that member with that
// offset had another outcome, or when nothing refused it.
func TestRefusedCommitWritten(t *testing.T) {
	h := History{
		Commits: []OffsetCommit{
			{Group: "g", Topic: topic, Offset: 5, Member: "a", Outcome: Acked},
			{Group: "g", Topic: topic, Offset: 7, Member: "a", Outcome: Failed, Attempts: 1, Brokers: []int32{1}},
			{Group: "g", Topic: topic, Offset: 9, Member: "b", Outcome: Failed, Attempts: 1},
			{Group: "g", Topic: topic, Offset: 11, Member: "b", Outcome: Failed, Attempts: 1},
			{Group: "g", Topic: topic, Offset: 11, Member: "b", Outcome: Unknown, Attempts: 2},
		},
		OffsetsLog: []LoggedCommit{
			{Group: "g", Topic: topic, Offset: 5, Metadata: "a", LogOffset: 1},
			{Group: "g", Topic: topic, Offset: 7, Metadata: "a", LogOffset: 2},  // refused, yet written
			{Group: "g", Topic: topic, Offset: 9, Metadata: "c", LogOffset: 3},  // another member's
			{Group: "g", Topic: topic, Offset: 11, Metadata: "b", LogOffset: 4}, // the unknown one's
		},
	}
	r := Check(h, Options{})
	if r.Counts[RefusedCommitWritten] != 1 || r.Anomalies[0].Offset != 7 {
		t.Fatalf("want one %s at offset 7, got:\n%s", RefusedCommitWritten, r)
	}
	h.OffsetsLog = h.OffsetsLog[:1]
	if r := Check(h, Options{}); !r.OK() {
		t.Fatalf("refused commits absent from the log reported:\n%s", r)
	}
}

// TestRetriedCommitRegressionNotReported is the history of seed 777's
// witness: a commit whose retries ended refused, but whose first attempt
// the next leader kept, is recorded unknown, and offset fetches that
// return it are no regression; recorded failed, they are one.
func TestRetriedCommitRegressionNotReported(t *testing.T) {
	h := History{
		Commits: []OffsetCommit{
			{Group: "g", Topic: topic, Offset: 3056, Start: 35364, End: 35367, Outcome: Acked, Attempts: 1},
			{Group: "g", Topic: topic, Offset: 3057, Start: 35381, End: 35789, Outcome: Unknown, Attempts: 3, Brokers: []int32{1, 1, 2}},
		},
		OffsetFetches: []OffsetFetch{{Group: "g", Topic: topic, Offset: 3057, Start: 36028, End: 36129}},
	}
	if r := Check(h, Options{}); !r.OK() {
		t.Fatalf("a retried commit's value reported:\n%s", r)
	}
	h.Commits[1].Outcome = Failed
	if r := Check(h, Options{}); r.Counts[CommittedOffsetRegression] != 1 {
		t.Fatalf("a refused commit's value not reported:\n%s", r)
	}
}

func TestEmptyAndString(t *testing.T) {
	r := Check(History{}, Options{})
	if !r.OK() || r.String() != "checker: no anomalies" {
		t.Fatalf("empty history: %s", r)
	}
}

func TestMaxPerKind(t *testing.T) {
	h := base()
	for i := range h.Polls {
		h.Polls[i].HW = 0
	}
	r := Check(h, Options{MaxPerKind: 1})
	if r.Counts[ReadPastHW] != 3 || len(r.Anomalies) != 1 {
		t.Fatalf("counts %v, kept %d", r.Counts, len(r.Anomalies))
	}
}
