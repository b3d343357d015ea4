package group

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) add(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
	return f.t
}

type harness struct {
	t   *testing.T
	c   *Coordinator
	clk *fakeClock
}

const (
	testDelay   = 300 * time.Millisecond
	testSession = 10 * time.Second
	testRebal   = 5 * time.Second
)

func newHarness(t *testing.T, opts ...Option) *harness {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	base := []Option{
		WithClock(clk),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithInitialRebalanceDelay(testDelay),
	}
	return &harness{t: t, c: New(append(base, opts...)...), clk: clk}
}

// advance moves the fake clock and ticks the coordinator.
func (h *harness) advance(d time.Duration) { h.c.Tick(h.clk.add(d)) }

func joinReq(version int16, group, memberID string, instance *string, protos ...string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = version
	r.Group = group
	r.MemberID = memberID
	r.InstanceID = instance
	r.SessionTimeoutMillis = int32(testSession / time.Millisecond)
	r.RebalanceTimeoutMillis = int32(testRebal / time.Millisecond)
	r.ProtocolType = "consumer"
	if len(protos) == 0 {
		protos = []string{"range"}
	}
	for _, p := range protos {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte("meta-" + p)})
	}
	return r
}

func syncReq(version int16, group, memberID string, gen int32, assign map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = version
	r.Group, r.MemberID, r.Generation = group, memberID, gen
	for id, a := range assign {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	return r
}

func hbReq(group, memberID string, gen int32) *kmsg.HeartbeatRequest {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 4
	r.Group, r.MemberID, r.Generation = group, memberID, gen
	return r
}

func done(w interface{ isDone() bool }) bool { return w.isDone() }

func (w *joinWaiter) isDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *syncWaiter) isDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// joinNew does the KIP-394 dance and returns the waiting second join.
func (h *harness) joinNew(group string, instance *string, protos ...string) *joinWaiter {
	h.t.Helper()
	w := h.c.startJoin(joinReq(9, group, "", instance, protos...), "cli", "/10.0.0.1")
	if instance != nil {
		return w
	}
	if !done(w) || w.resp.ErrorCode != errMemberIDRequired || w.resp.MemberID == "" {
		h.t.Fatalf("first join: want MEMBER_ID_REQUIRED with id, got %d %q", w.resp.ErrorCode, w.resp.MemberID)
	}
	return h.c.startJoin(joinReq(9, group, w.resp.MemberID, nil, protos...), "cli", "/10.0.0.1")
}

// stable builds a Stable group of n dynamic members and returns their ids
// (leader first) and the generation.
func (h *harness) stable(group string, n int) ([]string, int32) {
	h.t.Helper()
	var ws []*joinWaiter
	for range n {
		ws = append(ws, h.joinNew(group, nil))
	}
	h.advance(testDelay)
	ids, gen := h.finishJoins(ws)
	h.syncAll(group, ids, gen)
	return ids, gen
}

// finishJoins checks a completed round and returns ids (leader first).
func (h *harness) finishJoins(ws []*joinWaiter) ([]string, int32) {
	h.t.Helper()
	var ids []string
	var gen int32 = -1
	for _, w := range ws {
		if !done(w) || w.resp.ErrorCode != 0 {
			h.t.Fatalf("join not completed: done=%v code=%d", done(w), w.resp.ErrorCode)
		}
		if gen != -1 && w.resp.Generation != gen {
			h.t.Fatalf("generations differ: %d vs %d", gen, w.resp.Generation)
		}
		gen = w.resp.Generation
		if w.resp.LeaderID == w.resp.MemberID {
			ids = append([]string{w.resp.MemberID}, ids...)
		} else {
			ids = append(ids, w.resp.MemberID)
		}
	}
	return ids, gen
}

// syncAll syncs followers first, then the leader (ids[0]).
func (h *harness) syncAll(group string, ids []string, gen int32) {
	h.t.Helper()
	var fs []*syncWaiter
	for _, id := range ids[1:] {
		fs = append(fs, h.c.startSync(syncReq(5, group, id, gen, nil)))
	}
	assign := map[string][]byte{}
	for _, id := range ids {
		assign[id] = []byte("a-" + id)
	}
	lw := h.c.startSync(syncReq(5, group, ids[0], gen, assign))
	for i, w := range append([]*syncWaiter{lw}, fs...) {
		id := ids[0]
		if i > 0 {
			id = ids[i]
		}
		if !done(w) || w.resp.ErrorCode != 0 || string(w.resp.MemberAssignment) != "a-"+id {
			h.t.Fatalf("sync %s: done=%v code=%d assignment=%q", id, done(w), w.resp.ErrorCode, w.resp.MemberAssignment)
		}
	}
	if st, _ := h.c.State(group); st != StateStable {
		h.t.Fatalf("state %s, want Stable", st)
	}
}

func (h *harness) wantState(group, want string) {
	h.t.Helper()
	if st, _ := h.c.State(group); st != want {
		h.t.Fatalf("state %s, want %s", st, want)
	}
}

func ptr(s string) *string { return &s }
