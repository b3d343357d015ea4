package shipping

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

func TestCopiesTopicsByteForByteAndLongPolls(t *testing.T) {
	leader := newTestLeader(t, 3)
	leader.createTopic("orders", 3, map[string]string{"cleanup.policy": "delete"})
	leader.createTopic("events", 1, nil)
	for p := range int32(3) {
		leader.produce("orders", p, 20+int(p))
	}
	leader.produce("events", 0, 5)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "tok", "tok", nil)
	c.follow(3)
	c.waitInSync(t)
	sink.mu.Lock()
	got := sink.topics["orders"].info.Configs["cleanup.policy"]
	sink.mu.Unlock()
	if got != "delete" {
		t.Fatalf("configs not applied: %q", got)
	}

	// New data reaches the follower through the long-poll, well before
	// a poll interval could explain it: the follower waits up to 200ms
	// per request, and an idle follower must not spin.
	idle := leader.fetches.Load()
	time.Sleep(500 * time.Millisecond)
	if n := leader.fetches.Load() - idle; n > 4*10 {
		t.Fatalf("idle follower sent %d partition reports in 500ms: not long-polling", n)
	}
	start := time.Now()
	leader.produce("events", 0, 1)
	c.waitInSync(t)
	t.Logf("new data copied in %v", time.Since(start))

	// The follower learns the high watermark.
	sink.mu.Lock()
	hw := sink.hw[replication.TopicPartition{Topic: "events"}]
	sink.mu.Unlock()
	if hw != leader.log("events", 0).EndOffset() {
		t.Fatalf("follower saw hw %d", hw)
	}
	if st := c.follower.Status(); st.State != "fetching" || st.Epoch != 3 || st.LeaderID != 1 || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
}

func TestLongPollWakesOnAppend(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("t", 1, nil)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follower.cfg.MaxWait = 5 * time.Second // set before the first fetch
	c.follow(1)
	c.waitInSync(t)
	time.Sleep(100 * time.Millisecond) // the follower is now parked in a long-poll
	start := time.Now()
	leader.produce("t", 0, 1)
	c.waitInSync(t)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("append took %v to reach the follower", d)
	}
	// Stop abandons the long-poll promptly.
	stopStart := time.Now()
	c.follower.Stop()
	if d := time.Since(stopStart); d > time.Second {
		t.Fatalf("Stop took %v", d)
	}
}

func TestRecreatedTopicIsRecopied(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("a", 2, nil)
	leader.createTopic("b", 1, nil)
	leader.produce("a", 0, 5)
	leader.produce("a", 1, 5)
	leader.produce("b", 0, 5)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(1)
	c.waitInSync(t)

	leader.deleteTopic("a")
	leader.createTopic("a", 1, map[string]string{"retention.ms": "1000"})
	leader.produce("a", 0, 2) // fewer records than before: a stale copy cannot match
	leader.deleteTopic("b")
	c.waitInSync(t)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.deletes != 2 {
		t.Fatalf("%d topic deletes, want 2 (a recreated, b deleted)", sink.deletes)
	}
}

func TestCreatePartitionsCopiesOnlyNewPartitions(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("g", 1, nil)
	leader.produce("g", 0, 10)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(1)
	c.waitInSync(t)
	before := sink.log("g", 0)

	leader.growTopic("g", 3)
	leader.produce("g", 1, 3)
	leader.produce("g", 2, 4)
	c.waitInSync(t)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.grows != 1 || sink.deletes != 0 || sink.creates != 1 {
		t.Fatalf("grows %d deletes %d creates %d; want 1 0 1", sink.grows, sink.deletes, sink.creates)
	}
	if sink.topics["g"].logs[0] != before {
		t.Fatal("partition 0 was recreated")
	}
}

// TestDivergentTailTruncated: the follower led epoch 2 and wrote a tail the
// leader of epoch 3 never had (KIP-279); it is cut at the end of epoch 1
// and replaced by the leader's epoch-3 records.
func TestDivergentTailTruncated(t *testing.T) {
	leader := newTestLeader(t, 3)
	leader.createTopic("d", 1, nil)
	shared := [][]byte{batch(t, 0, 1, 3, "x"), batch(t, 3, 1, 2, "y")}
	for _, b := range shared {
		leader.appendReplica("d", 0, b)
	}
	leader.appendReplica("d", 0, batch(t, 5, 3, 4, "leader3"))
	leader.appendReplica("d", 0, batch(t, 9, 3, 1, "leader3"))

	sink := newTestSink(t)
	_, topics := leader.Manifest()
	if err := sink.CreateTopic(topics[0]); err != nil {
		t.Fatal(err)
	}
	fl := sink.log("d", 0)
	for _, b := range shared {
		if err := fl.AppendReplica(b); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 2's tail, longer than the leader's log, never replicated.
	for _, b := range [][]byte{batch(t, 5, 2, 6, "old2"), batch(t, 11, 2, 3, "old2")} {
		if err := fl.AppendReplica(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fl.Sync(); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(3)
	c.waitInSync(t)
	h := fl.EpochHistory()
	if len(h) != 2 || h[0].Epoch != 1 || h[1].Epoch != 3 || h[1].StartOffset != 5 {
		t.Fatalf("epoch history %+v", h)
	}
	if st := c.follower.Status(); st.Resets != 0 {
		t.Fatalf("partition was reset (%d), not truncated", st.Resets)
	}
}

// TestNoEpochHistoryIsRecopied: records without epoch history (static mode
// leftovers) are discarded and recopied, since nothing tells which of them
// the leader has.
func TestNoEpochHistoryIsRecopied(t *testing.T) {
	leader := newTestLeader(t, 2)
	leader.createTopic("s", 1, nil)
	leader.produce("s", 0, 4)
	sink := newTestSink(t)
	_, topics := leader.Manifest()
	if err := sink.CreateTopic(topics[0]); err != nil {
		t.Fatal(err)
	}
	fl := sink.log("s", 0)
	for i := range 3 {
		if err := fl.AppendReplica(batch(t, int64(2*i), -1, 2, "junk")); err != nil {
			t.Fatal(err)
		}
	}
	if len(fl.EpochHistory()) != 0 || fl.EndOffset() != 6 {
		t.Fatal("setup: want records without epoch history")
	}
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(2)
	c.waitInSync(t)
	if c.follower.Status().Resets != 1 {
		t.Fatalf("resets %d", c.follower.Status().Resets)
	}
}

// TestBelowLeaderLogStartResets: a follower whose end is below the
// leader's log start is told OFFSET_OUT_OF_RANGE and restarts there.
func TestBelowLeaderLogStartResets(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("r", 1, nil)
	leader.produce("r", 0, 3)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(1)
	c.waitInSync(t)

	// The follower stops following; the leader moves on and deletes
	// records past the follower's end.
	c.follower.ClearLeader()
	eventually(t, 5*time.Second, "idle", func() error {
		if s := c.follower.Status().State; s != "idle" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	leader.produce("r", 0, 2000) // several 4 KiB segments
	ll := leader.log("r", 0)
	start, err := ll.DeleteRecords(ll.EndOffset() - 10)
	if err != nil {
		t.Fatal(err)
	}
	if start <= sink.log("r", 0).EndOffset() {
		t.Fatalf("setup: leader start %d not above the follower's end", start)
	}
	c.follow(1) // the same leader and epoch: truncation is not rerun
	c.waitInSync(t)
	if c.follower.Status().Resets != 1 {
		t.Fatalf("resets %d", c.follower.Status().Resets)
	}
	if fs, ls := sink.log("r", 0).StartOffset(), ll.StartOffset(); fs > ls || ls-fs >= 3 {
		t.Fatalf("follower restarted at %d, leader start %d", fs, ls)
	}
}

func TestWrongTokenIsRejected(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("a", 1, nil)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "secret", "guess", nil)

	for _, auth := range []string{"", "Bearer guess", "Basic secret"} {
		req, _ := http.NewRequest(http.MethodGet, c.srv.URL+PathManifest, nil)
		req.Header.Set(HeaderLeaderEpoch, "1")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("auth %q: %d", auth, resp.StatusCode)
		}
	}

	c.follow(1)
	eventually(t, 5*time.Second, "follower reports 401", func() error {
		if st := c.follower.Status(); !st.Unauthorized || !strings.Contains(st.LastError, "401") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if len(sink.Topics()) != 0 {
		t.Fatal("an unauthorized follower applied a manifest")
	}
}

func TestEpochFencing(t *testing.T) {
	leader := newTestLeader(t, 5)
	leader.createTopic("f", 1, nil)
	leader.produce("f", 0, 3)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)

	check := func(epoch string, status int, name string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, c.srv.URL+PathFetch, strings.NewReader(`{"partitions":[]}`))
		if epoch != "" {
			req.Header.Set(HeaderLeaderEpoch, epoch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb errorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		if resp.StatusCode != status || eb.Error != name {
			t.Fatalf("epoch %q: %d %q, want %d %q", epoch, resp.StatusCode, eb.Error, status, name)
		}
	}
	check("4", http.StatusConflict, ErrNameFenced)
	check("6", http.StatusConflict, ErrNameUnknownEpoch)
	check("", http.StatusBadRequest, "missing or bad "+HeaderLeaderEpoch)

	// A stale follower is fenced and waits for a new leader.
	c.follow(4)
	eventually(t, 5*time.Second, "fenced", func() error {
		if st := c.follower.Status(); !st.Fenced || st.State != "idle" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	fetches := leader.fetches.Load()
	time.Sleep(300 * time.Millisecond)
	if leader.fetches.Load() != fetches || len(sink.Topics()) != 0 {
		t.Fatal("a fenced follower kept going")
	}

	// A follower ahead of the leader retries (UNKNOWN_LEADER_EPOCH)
	// until the leader learns its epoch.
	c.follow(6)
	eventually(t, 5*time.Second, "unknown epoch", func() error {
		if st := c.follower.Status(); !strings.Contains(st.LastError, ErrNameUnknownEpoch) || st.Fenced {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	leader.setEpoch(6, true)
	c.waitInSync(t)

	// Deposed mid-stream: NOT_LEADER, retried (the leader the group
	// names may not have promoted itself yet), then a new leader.
	leader.setEpoch(6, false)
	eventually(t, 5*time.Second, "not leader", func() error {
		if st := c.follower.Status(); !strings.Contains(st.LastError, ErrNameNotLeader) || st.Fenced || st.State == "idle" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	leader.setEpoch(7, true)
	leader.produce("f", 0, 2)
	c.follow(7)
	c.waitInSync(t)
}

// TestCorruptBatchIsRefetched tampers with fetch responses: a flipped
// payload byte (caught by the CRC) and a forged epoch (outside the CRC,
// caught by the bounds) are never appended; the follower refetches.
func TestCorruptBatchIsRefetched(t *testing.T) {
	for _, mode := range []string{"payload", "epoch", "baseOffset", "baseOffsetGap"} {
		t.Run(mode, func(t *testing.T) {
			leader := newTestLeader(t, 1)
			leader.createTopic("c", 2, nil)
			leader.produce("c", 0, 10)
			leader.produce("c", 1, 10)
			sink := newTestSink(t)
			var tampered atomic.Int64
			c := newCluster(t, leader, sink, "", "", func(w *testHandlerWrap) {
				w.rewrite = func(body []byte) []byte {
					if tampered.Load() >= 3 {
						return body
					}
					r, err := decodeFetchResponse(body)
					if err != nil {
						t.Errorf("decode: %v", err)
						return body
					}
					for _, p := range r.parts {
						if len(p.records) == 0 {
							continue
						}
						switch mode {
						case "payload":
							p.records[len(p.records)-1] ^= 0x40
						case "epoch":
							binary.BigEndian.PutUint32(p.records[12:], 99)
						case "baseOffset":
							binary.BigEndian.PutUint64(p.records[0:], 1000)
						case "baseOffsetGap":
							// Inside the leader's log, so it looks like
							// a compaction gap, but the next batch
							// starts inside it.
							binary.BigEndian.PutUint64(p.records[0:], binary.BigEndian.Uint64(p.records[0:])+2)
						}
						tampered.Add(1)
						break
					}
					return body
				}
			})
			c.follow(1)
			c.waitInSync(t)
			if tampered.Load() == 0 {
				t.Fatal("nothing tampered")
			}
			if st := c.follower.Status(); st.CorruptBatches < 1 {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestSwitchLeader: SetLeader abandons a long-poll on the old leader and
// follows the new one at once.
func TestSwitchLeader(t *testing.T) {
	old := newTestLeader(t, 1)
	old.createTopic("t", 1, nil)
	old.produce("t", 0, 2)
	sink := newTestSink(t)
	c := newCluster(t, old, sink, "", "", nil)
	c.follower.cfg.MaxWait = 10 * time.Second
	c.follow(1)
	c.waitInSync(t)

	// The new leader of epoch 2 has the same epoch-1 prefix and more.
	next := newTestLeader(t, 2)
	next.createTopic("t", 1, nil)
	next.mu.Lock()
	next.topics["t"].info.ID = old.topics["t"].info.ID
	next.mu.Unlock()
	for _, off := range []int64{0} {
		b, err := old.log("t", 0).Read(off, 1<<20, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 {
			n := int(binary.BigEndian.Uint32(b[8:])) + 12
			next.appendReplica("t", 0, b[:n])
			b = b[n:]
		}
	}
	next.produce("t", 0, 3)
	c2 := newCluster(t, next, sink, "", "", nil)
	c2.follower.Stop() // only its server is used
	start := time.Now()
	c.follower.SetLeader(2, c2.srv.URL, 2)
	eventually(t, 5*time.Second, "follows the new leader", func() error { return inSync(t, next, sink) })
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("switch took %v", d)
	}
	if !bytes.Equal(readAll(t, next.log("t", 0)), readAll(t, sink.log("t", 0))) {
		t.Fatal("bytes differ")
	}
	c.follower.Stop() // before the servers close: it is parked in a long-poll
}

func TestRequestLimits(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("t", 1, nil)
	srv := newCluster(t, leader, newTestSink(t), "", "", nil).srv
	post := func(path, body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set(HeaderLeaderEpoch, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(PathFetch, `{"partitions":[`+strings.Repeat(`{"topic":"t","partition":0,"offset":0},`, MaxRequestBytes/30)+`]}`); got != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge request: %d", got)
	}
	if got := post(PathFetch, `{"partitions":[{"topic":"t","partition":-1,"offset":0}]}`); got != http.StatusBadRequest {
		t.Fatalf("bad partition: %d", got)
	}
	if got := post(PathFetch, `not json`); got != http.StatusBadRequest {
		t.Fatalf("bad json: %d", got)
	}
	if got := post(PathManifest, ``); got != http.StatusMethodNotAllowed {
		t.Fatalf("POST manifest: %d", got)
	}
	if got := post("/replication/nope", ``); got != http.StatusNotFound {
		t.Fatalf("unknown path: %d", got)
	}
}

// TestFetchResponseBudget: the response holds at most maxBytes of records,
// except that the first batch is whole (KIP-74), and partitions after the
// first only get whole batches within what is left.
func TestFetchResponseBudget(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("t", 2, nil)
	leader.produce("t", 0, 50)
	leader.produce("t", 1, 50)
	h := &handler{src: leader, maxResponse: 1000, log: quiet}
	parts := []FetchPosition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	resp, data := h.collect(parts, 1000)
	if !data {
		t.Fatal("no data")
	}
	total := len(resp.parts[0].records) + len(resp.parts[1].records)
	if total > 1000 || len(resp.parts[0].records) == 0 {
		t.Fatalf("records %d + %d", len(resp.parts[0].records), len(resp.parts[1].records))
	}
	resp, _ = h.collect(parts, 1)
	if len(resp.parts[0].records) == 0 || len(resp.parts[1].records) != 0 {
		t.Fatalf("tiny budget: %d + %d", len(resp.parts[0].records), len(resp.parts[1].records))
	}
}

func TestDecodeFetchResponseRejectsMalformed(t *testing.T) {
	r := &fetchResponse{digest: "v1", parts: []fetchPart{
		{topic: "a", partition: 1, hw: 5, logStart: 0, logEnd: 9, records: []byte("abcdef")},
		{topic: "bb", partition: 0, code: codeOffsetOutOfRange, hw: -1, logStart: 7, logEnd: 9},
	}}
	b := r.encode()
	if len(b) != r.size() {
		t.Fatalf("encoded %d bytes, size says %d (the Content-Length)", len(b), r.size())
	}
	got, err := decodeFetchResponse(b)
	if err != nil || got.digest != "v1" || len(got.parts) != 2 || string(got.parts[0].records) != "abcdef" || got.parts[1].logStart != 7 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// Written in pieces, records and headers interleaved, empty parts
	// between: the same bytes.
	r3 := &fetchResponse{digest: "v2", parts: []fetchPart{
		{topic: "x", partition: 0, code: codeUnknownTopic},
		{topic: "a", partition: 1, hw: 5, logEnd: 9, records: []byte("abc")},
		{topic: "b", partition: 2},
		{topic: "c", partition: 3, records: []byte("defg")},
		{topic: "d", partition: 4},
	}}
	b3 := r3.encode()
	got, err = decodeFetchResponse(b3)
	if err != nil || len(b3) != r3.size() || len(got.parts) != 5 || string(got.parts[1].records) != "abc" ||
		string(got.parts[3].records) != "defg" || got.parts[4].topic != "d" || got.parts[0].code != codeUnknownTopic {
		t.Fatalf("pieces: %+v %v (%d bytes, size %d)", got, err, len(b3), r3.size())
	}
	for i := range len(b) {
		if _, err := decodeFetchResponse(b[:i]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", i)
		}
	}
	if _, err := decodeFetchResponse(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	huge := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(huge[4+2+2:], 0xffffffff)
	if _, err := decodeFetchResponse(huge); err == nil {
		t.Fatal("absurd partition count accepted")
	}
}

// TestFollowerAheadIsTruncated: a follower whose end is past the leader's
// (same epoch) gets OFFSET_OUT_OF_RANGE and reruns the truncation.
func TestFollowerAheadIsTruncated(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("a", 1, nil)
	leader.produce("a", 0, 6)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(1)
	c.waitInSync(t)
	c.follower.ClearLeader()
	eventually(t, 5*time.Second, "idle", func() error {
		if s := c.follower.Status().State; s != "idle" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	if err := leader.log("a", 0).Truncate(9); err != nil {
		t.Fatal(err)
	}
	c.follow(1)
	c.waitInSync(t)
	leader.produce("a", 0, 2)
	c.waitInSync(t)
}

// TestFsyncFailureStopsReporting: a follower partition whose fsync fails
// is no longer reported (its end is not durable); the others go on.
func TestFsyncFailureStopsReporting(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("a", 2, nil)
	leader.produce("a", 0, 2)
	leader.produce("a", 1, 2)
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	var syncs atomic.Int64
	sink.fs.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			syncs.Add(1)
		}
		return nil
	})
	c.follow(1)
	c.waitInSync(t)
	if syncs.Load() == 0 {
		t.Fatal("the follower never fsynced")
	}
	sink.fs.FailNext(vfs.OpSync, "/a-id1/1/", vfs.ErrInjected)
	leader.produce("a", 1, 3)
	leader.produce("a", 0, 3)
	eventually(t, 5*time.Second, "partition 1 left out", func() error {
		if st := c.follower.Status(); len(st.Unsyncable) != 1 || st.Unsyncable[0] != "a-1" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	eventually(t, 5*time.Second, "partition 0 copied", func() error {
		if got, want := sink.log("a", 0).EndOffset(), leader.log("a", 0).EndOffset(); got != want {
			return fmt.Errorf("end %d, want %d", got, want)
		}
		return nil
	})
	fl := sink.log("a", 1)
	if fl.DurableEnd() >= leader.log("a", 1).EndOffset() {
		t.Fatalf("durable end %d despite the failed fsync", fl.DurableEnd())
	}
	// The violations check in the cleanup proves no report exceeded it.
}

// TestFsyncFailureIsFatal: with Fatal set (the broker's), a failed fsync
// of a fetched batch is handed to it, naming the partition.
func TestFsyncFailureIsFatal(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("a", 1, nil)
	leader.produce("a", 0, 2)
	sink := newTestSink(t)
	fatal := make(chan error, 16)
	c := newCluster(t, leader, sink, "", "", nil, func(fc *FollowerConfig) {
		fc.Fatal = func(err error) { fatal <- err }
	})
	c.follow(1)
	c.waitInSync(t)
	sink.fs.FailNext(vfs.OpSync, "/a-id1/0/", vfs.ErrInjected)
	leader.produce("a", 0, 3)
	select {
	case err := <-fatal:
		if !errors.Is(err, vfs.ErrInjected) || !strings.Contains(err.Error(), "a-0") {
			t.Fatalf("Fatal got %v, want the injected error naming a-0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed fsync did not reach Fatal")
	}
}

func TestRequestWindow(t *testing.T) {
	short := func(int) string { return "t" }
	if got := requestWindow(10, short); got != 10 {
		t.Fatalf("%d", got)
	}
	if got := requestWindow(3*MaxRequestPartitions, short); got != MaxRequestPartitions {
		t.Fatalf("%d", got)
	}
	if got := requestWindow(3*MaxRequestPartitions, func(int) string { return "" }); got != MaxRequestPartitions {
		t.Fatalf("%d", got)
	}
	long := func(int) string { return strings.Repeat("x", 249) }
	got := requestWindow(MaxRequestPartitions, long)
	if got >= MaxRequestPartitions || got*(249+64) > MaxRequestBytes/8*7 || got == 0 {
		t.Fatalf("%d", got)
	}
	if got := requestWindow(1, func(int) string { return strings.Repeat("x", MaxRequestBytes) }); got != 1 {
		t.Fatalf("%d", got)
	}
}

// countingLog is a ReplicaLog whose Sync records how many run at once.
type countingLog struct {
	ReplicaLog
	mu        *sync.Mutex
	now, peak *int
}

func (c countingLog) Sync() (int64, error) {
	c.mu.Lock()
	*c.now++
	*c.peak = max(*c.peak, *c.now)
	c.mu.Unlock()
	time.Sleep(time.Millisecond)
	c.mu.Lock()
	*c.now--
	c.mu.Unlock()
	return 0, nil
}

func (countingLog) DropCache(int64) {}

// TestSyncAllBounded: a fetch answer touching many partitions fsyncs them
// in parallel, but at most maxParallelSyncs at once.
func TestSyncAllBounded(t *testing.T) {
	var mu sync.Mutex
	var now, peak int
	items := make([]syncItem, 100)
	for i := range items {
		items[i] = syncItem{l: countingLog{mu: &mu, now: &now, peak: &peak}}
	}
	f := &Follower{}
	if err := f.syncAll(items); err != nil {
		t.Fatal(err)
	}
	if peak < 2 || peak > maxParallelSyncs {
		t.Fatalf("%d fsyncs at once, want between 2 and %d", peak, maxParallelSyncs)
	}
}

// TestCopiesCompactionGaps: a follower that starts copying after the
// leader's compaction removed whole batches copies the gaps and ends in
// sync, byte for byte.
func TestCopiesCompactionGaps(t *testing.T) {
	leader := newTestLeader(t, 2)
	leader.createTopic("k", 1, map[string]string{"cleanup.policy": "compact"})
	// Every record has the same key, so compaction keeps only the newest
	// and drops the older batches of every rolled segment whole.
	leader.produce("k", 0, 200)
	if _, err := leader.log("k", 0).Compact(time.UnixMilli(10), storage.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	leader.produce("k", 0, 5)
	first := readFrom(t, leader.log("k", 0), 0)
	if len(first) == 0 || recordbatch.BaseOffset(first) == 0 {
		t.Fatal("compaction left no gap at the start of the log")
	}
	sink := newTestSink(t)
	c := newCluster(t, leader, sink, "", "", nil)
	c.follow(2)
	c.waitInSync(t)
	if st := c.follower.Status(); st.CorruptBatches != 0 {
		t.Fatalf("gaps counted as corrupt batches: %+v", st)
	}
}

// TestPausedFollowerFetchesPositionsOnly: while Pause names a reason the
// follower appends nothing, its reported position stands still (so the
// leader's lag rule can take it out of the ISR), and it still learns the
// leader's high watermark; it catches up once the pause ends.
func TestPausedFollowerFetchesPositionsOnly(t *testing.T) {
	leader := newTestLeader(t, 1)
	leader.createTopic("p", 1, nil)
	leader.produce("p", 0, 3)
	sink := newTestSink(t)
	var pause atomic.Value
	pause.Store("")
	var reported atomic.Int64
	var answered atomic.Int64
	count := func(w *testHandlerWrap) {
		w.rewrite = func(body []byte) []byte { answered.Add(1); return body }
	}
	c := newCluster(t, leader, sink, "", "", count, func(fc *FollowerConfig) {
		fc.Pause = func() string { return pause.Load().(string) }
		fc.PausePoll = 20 * time.Millisecond
	})
	var paused atomic.Bool
	onFetch := leader.onFetch
	leader.onFetch = func(r int32, tp replication.TopicPartition, end int64) {
		if paused.Load() {
			reported.Store(end)
		}
		onFetch(r, tp, end)
	}
	c.follow(1)
	c.waitInSync(t)
	synced := sink.log("p", 0).EndOffset()

	pause.Store("disk full")
	eventually(t, 5*time.Second, "paused", func() error {
		if st := c.follower.Status(); st.Paused != "disk full" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	paused.Store(true)
	fetches := answered.Load()
	leader.produce("p", 0, 5)
	eventually(t, 5*time.Second, "paused fetches", func() error {
		if answered.Load() < fetches+3 {
			return errors.New("fewer than 3")
		}
		return nil
	})
	if end := sink.log("p", 0).EndOffset(); end != synced {
		t.Fatalf("a paused follower appended: end %d, was %d", end, synced)
	}
	if r := reported.Load(); r != 0 {
		t.Fatalf("a paused follower's position %d counted as an acknowledgement", r)
	}
	sink.mu.Lock()
	hw := sink.hw[replication.TopicPartition{Topic: "p"}]
	sink.mu.Unlock()
	if want := leader.log("p", 0).EndOffset(); hw != want {
		t.Fatalf("a paused follower learned hw %d, the leader's is %d", hw, want)
	}

	pause.Store("")
	c.waitInSync(t)
	if st := c.follower.Status(); st.Paused != "" {
		t.Fatalf("status %+v after the pause", st)
	}
}

// syncingSink is a Sink that syncs logs together (LogSyncer) and records
// each call.
type syncingSink struct {
	Sink
	calls [][]ReplicaLog
	fail  error
}

func (s *syncingSink) SyncLogs(logs []ReplicaLog) []error {
	s.calls = append(s.calls, logs)
	errs := make([]error, len(logs))
	for i, l := range logs {
		if _, err := l.Sync(); err != nil {
			errs[i] = err
		}
	}
	if s.fail != nil {
		errs[len(errs)-1] = s.fail
	}
	return errs
}

// TestSyncAllTogether: when the sink can sync logs together, an answer
// that appended to several partitions is made durable with one SyncLogs
// call covering all of them (one volume sync in the broker, not one fsync
// each), and a log's failure there is the answer's error, named.
func TestSyncAllTogether(t *testing.T) {
	var mu sync.Mutex
	var now, peak int
	items := make([]syncItem, 5)
	for i := range items {
		items[i] = syncItem{tp: replication.TopicPartition{Topic: "t", Partition: int32(i)}, l: countingLog{mu: &mu, now: &now, peak: &peak}}
	}
	s := &syncingSink{}
	f := &Follower{sink: s}
	if err := f.syncAll(items); err != nil {
		t.Fatal(err)
	}
	if len(s.calls) != 1 || len(s.calls[0]) != len(items) {
		t.Fatalf("SyncLogs calls %v, want one with %d logs", s.calls, len(items))
	}
	for i, l := range s.calls[0] {
		if l != items[i].l {
			t.Fatalf("log %d is not the answer's log %d", i, i)
		}
	}
	// One partition alone syncs on its own.
	if err := f.syncAll(items[:1]); err != nil || len(s.calls) != 1 {
		t.Fatalf("one log: err %v, SyncLogs calls %d", err, len(s.calls))
	}
	s.fail = errors.New("disk gone")
	err := f.syncAll(items)
	if err == nil || !errors.Is(err, s.fail) || !strings.Contains(err.Error(), "t-4") {
		t.Fatalf("error %v, want the failed log's, named", err)
	}
}

// TestFetchRequestFraming: the binary fetch request carries what the JSON
// one does, and the leader's decoder refuses every truncation, trailing
// bytes, unknown flags and absurd counts.
func TestFetchRequestFraming(t *testing.T) {
	req := FetchRequest{Replica: 3, MaxBytes: 1 << 20, MaxWaitMs: 500, PositionsOnly: true, Partitions: []FetchPosition{
		{Topic: "orders", Partition: 0, Offset: 17},
		{Topic: "orders", Partition: 1, Offset: 1 << 40},
		{Topic: "e", Partition: 7, Offset: 0},
	}}
	b := req.appendBinary(nil)
	got, err := decodeFetchRequest(b)
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, req)
	}
	req.PositionsOnly, req.Partitions = false, nil
	if got, err := decodeFetchRequest(req.appendBinary(nil)); err != nil || got.PositionsOnly || len(got.Partitions) != 0 {
		t.Fatalf("empty request: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := decodeFetchRequest(b[:i]); !errors.Is(err, errFrame) {
			t.Fatalf("prefix of %d bytes: %v", i, err)
		}
	}
	if _, err := decodeFetchRequest(append(b, 0)); !errors.Is(err, errFrame) {
		t.Fatalf("trailing byte: %v", err)
	}
	flags := append([]byte(nil), b...)
	flags[16] |= 2
	if _, err := decodeFetchRequest(flags); !errors.Is(err, errFrame) {
		t.Fatalf("unknown flag: %v", err)
	}
	huge := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(huge[17:], 0xffffffff)
	if _, err := decodeFetchRequest(huge); !errors.Is(err, errFrame) {
		t.Fatalf("absurd partition count: %v", err)
	}
	many := FetchRequest{Partitions: make([]FetchPosition, MaxRequestPartitions+1)}
	for i := range many.Partitions {
		many.Partitions[i].Topic = "t"
	}
	if _, err := decodeFetchRequest(many.appendBinary(nil)); !errors.Is(err, errTooManyPartitions) {
		t.Fatalf("%d partitions: %v", len(many.Partitions), err)
	}
}

// TestFetchRequestsBinaryOrJSON: followers fetch with binary requests; a
// leader of an older build, which reads every request as JSON, refuses
// the first, and the follower copies with JSON requests from then on.
func TestFetchRequestsBinaryOrJSON(t *testing.T) {
	for _, older := range []bool{false, true} {
		leader := newTestLeader(t, 1)
		leader.createTopic("t", 2, nil)
		leader.produce("t", 0, 10)
		leader.produce("t", 1, 3)
		sink := newTestSink(t)
		var wrap *testHandlerWrap
		c := newCluster(t, leader, sink, "", "", func(w *testHandlerWrap) {
			w.asOlderBuild = older
			wrap = w
		})
		c.follow(1)
		c.waitInSync(t)
		leader.produce("t", 1, 4)
		c.waitInSync(t)
		bin, js := wrap.binaryFetches.Load(), wrap.jsonFetches.Load()
		switch {
		case !older && (bin == 0 || js != 0):
			t.Errorf("current leader: %d binary and %d JSON fetches; want only binary", bin, js)
		case older && (bin != 1 || js == 0):
			t.Errorf("older leader: %d binary and %d JSON fetches; want one binary, then JSON", bin, js)
		}
		c.follower.Stop()
	}
}

// startingLog is a ReplicaLog at offset 0 with no epoch history whose
// StartEpoch records what it was asked and how many ran at once.
type startingLog struct {
	ReplicaLog
	mu        *sync.Mutex
	now, peak *int
	started   *[]int32
}

func (s startingLog) EndOffset() int64   { return 0 }
func (s startingLog) LatestEpoch() int32 { return -1 }

func (s startingLog) StartEpoch(epoch int32, at int64) error {
	s.mu.Lock()
	*s.now++
	*s.peak = max(*s.peak, *s.now)
	*s.started = append(*s.started, epoch)
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	*s.now--
	s.mu.Unlock()
	return nil
}

// TestStartEpochsTogether: an answer whose batches start a newer epoch
// on many partitions has the epochs' starts persisted several at once,
// but only for a whole batch at the log's end, below the leader's, whose
// checksum holds and whose epoch appendAll would take.
func TestStartEpochsTogether(t *testing.T) {
	var mu sync.Mutex
	var now, peak int
	var started []int32
	batch := func(epoch int32, base int64) []byte {
		b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		recordbatch.SetBaseOffset(b, base)
		recordbatch.SetPartitionLeaderEpoch(b, epoch)
		return b
	}
	const epoch = 5
	parts := []fetchPart{}
	asked := map[replication.TopicPartition]int64{}
	logs := map[replication.TopicPartition]ReplicaLog{}
	addEnd := func(name string, records []byte, logEnd int64) {
		tp := replication.TopicPartition{Topic: name}
		parts = append(parts, fetchPart{topic: name, records: records, logEnd: logEnd})
		asked[tp] = 0
		logs[tp] = startingLog{mu: &mu, now: &now, peak: &peak, started: &started}
	}
	add := func(name string, records []byte) { addEnd(name, records, 1) }
	for i := range 40 {
		add(fmt.Sprintf("ok-%d", i), batch(epoch, 0))
	}
	corrupt := batch(epoch, 0)
	corrupt[len(corrupt)-1] ^= 1
	add("corrupt", corrupt)
	add("above-ceiling", batch(epoch+1, 0))
	add("off-the-end", batch(epoch, 3))
	add("torn", batch(epoch, 0)[:65])
	addEnd("beyond-the-leader's-end", batch(epoch, 0), 0)
	f := &Follower{sink: newTestSink(t)}
	f.startEpochs(parts, asked, logs, epoch)
	if len(started) != 40 {
		t.Fatalf("%d epoch starts, want the 40 whole batches' at the log's end within the ceiling", len(started))
	}
	for _, e := range started {
		if e != epoch {
			t.Fatalf("started epoch %d, want %d", e, epoch)
		}
	}
	if peak < 2 || peak > maxParallelSyncs {
		t.Fatalf("%d epoch starts at once, want between 2 and %d", peak, maxParallelSyncs)
	}
}
