package group

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestJoinErrors(t *testing.T) {
	h := newHarness(t, WithMaxMembers(2))
	ids, _ := h.stable("g", 1)
	_ = ids
	cases := []struct {
		name string
		req  func() *kmsg.JoinGroupRequest
		want int16
	}{
		{"empty group", func() *kmsg.JoinGroupRequest { return joinReq(9, "", "", nil) }, errInvalidGroupID},
		{"session too small", func() *kmsg.JoinGroupRequest {
			r := joinReq(9, "g", "", nil)
			r.SessionTimeoutMillis = 10
			return r
		}, errInvalidSessionTimeout},
		{"no protocols", func() *kmsg.JoinGroupRequest {
			r := joinReq(9, "g", "", nil)
			r.Protocols = nil
			return r
		}, errInconsistentGroupProtocol},
		{"no protocol type", func() *kmsg.JoinGroupRequest {
			r := joinReq(9, "g", "", nil)
			r.ProtocolType = ""
			return r
		}, errInconsistentGroupProtocol},
		{"unknown member, unknown group", func() *kmsg.JoinGroupRequest { return joinReq(9, "nope", "x", nil) }, errUnknownMemberID},
		{"unknown member", func() *kmsg.JoinGroupRequest { return joinReq(9, "g", "x", nil) }, errUnknownMemberID},
		{"other protocol type", func() *kmsg.JoinGroupRequest {
			r := joinReq(9, "g", "", nil)
			r.ProtocolType = "connect"
			return r
		}, errInconsistentGroupProtocol},
		{"no common protocol", func() *kmsg.JoinGroupRequest { return joinReq(9, "g", "", nil, "sticky") }, errInconsistentGroupProtocol},
		{"v4 needs member id", func() *kmsg.JoinGroupRequest { return joinReq(4, "g", "", nil) }, errMemberIDRequired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := h.c.startJoin(tc.req(), "cli", "h")
			if !done(w) || w.resp.ErrorCode != tc.want {
				t.Fatalf("got done=%v code %d, want %d", done(w), w.resp.ErrorCode, tc.want)
			}
		})
	}
	// One member plus one pending id fills the group (max 2).
	w := h.c.startJoin(joinReq(9, "g", "", nil), "cli", "h")
	if w.resp.ErrorCode != errGroupMaxSizeReached {
		t.Fatalf("max size: got %d", w.resp.ErrorCode)
	}
	h.wantState("g", StateStable)

	h2 := newHarness(t, WithMaxGroups(1))
	h2.stable("a", 1)
	if w := h2.c.startJoin(joinReq(9, "b", "", nil), "cli", "h"); w.resp.ErrorCode != errGroupMaxSizeReached {
		t.Fatalf("max groups: got %d", w.resp.ErrorCode)
	}
}

func TestJoinV3AssignsIDImmediately(t *testing.T) {
	h := newHarness(t)
	w := h.c.startJoin(joinReq(3, "g", "", nil), "client-a", "h")
	if done(w) {
		t.Fatal("join answered before the initial delay")
	}
	h.advance(testDelay)
	if !done(w) || w.resp.ErrorCode != 0 || w.resp.Generation != 1 || w.resp.LeaderID != w.resp.MemberID {
		t.Fatalf("got %+v", w.resp)
	}
	if len(w.resp.MemberID) < len("client-a-")+36 || w.resp.MemberID[:9] != "client-a-" {
		t.Fatalf("member id %q", w.resp.MemberID)
	}
}

func TestSyncHeartbeatCommitErrors(t *testing.T) {
	h := newHarness(t)
	ids, gen := h.stable("g", 2)
	leader, follower := ids[0], ids[1]

	for _, tc := range []struct {
		name string
		req  *kmsg.SyncGroupRequest
		want int16
	}{
		{"empty group", syncReq(5, "", leader, gen, nil), errInvalidGroupID},
		{"unknown group", syncReq(5, "x", leader, gen, nil), errUnknownMemberID},
		{"unknown member", syncReq(5, "g", "zz", gen, nil), errUnknownMemberID},
		{"old generation", syncReq(5, "g", follower, gen-1, nil), errIllegalGeneration},
		{"stable resync", syncReq(5, "g", follower, gen, nil), 0},
	} {
		w := h.c.startSync(tc.req)
		if !done(w) || w.resp.ErrorCode != tc.want || w.resp.MemberAssignment == nil {
			t.Fatalf("%s: done=%v code=%d want %d assignment nil=%v", tc.name, done(w), w.resp.ErrorCode, tc.want, w.resp.MemberAssignment == nil)
		}
	}
	w := h.c.startSync(syncReq(5, "g", follower, gen, nil))
	if w.resp.ProtocolType == nil || *w.resp.ProtocolType != "consumer" || w.resp.Protocol == nil || *w.resp.Protocol != "range" {
		t.Fatalf("v5 sync protocol fields: %v %v", w.resp.ProtocolType, w.resp.Protocol)
	}
	bad := syncReq(5, "g", follower, gen, nil)
	bad.Protocol = ptr("sticky")
	if w := h.c.startSync(bad); w.resp.ErrorCode != errInconsistentGroupProtocol {
		t.Fatalf("protocol mismatch: %d", w.resp.ErrorCode)
	}

	for _, tc := range []struct {
		name string
		req  *kmsg.HeartbeatRequest
		want int16
	}{
		{"ok", hbReq("g", follower, gen), 0},
		{"empty group", hbReq("", follower, gen), errInvalidGroupID},
		{"unknown group", hbReq("x", follower, gen), errUnknownMemberID},
		{"unknown member", hbReq("g", "zz", gen), errUnknownMemberID},
		{"bad generation", hbReq("g", follower, gen+1), errIllegalGeneration},
	} {
		if got := h.c.Heartbeat(tc.req).ErrorCode; got != tc.want {
			t.Fatalf("heartbeat %s: %d want %d", tc.name, got, tc.want)
		}
	}

	for _, tc := range []struct {
		name      string
		group, id string
		gen       int32
		want      int16
	}{
		{"member ok", "g", follower, gen, 0},
		{"empty group id", "", follower, gen, errInvalidGroupID},
		{"old generation", "g", follower, gen - 1, errIllegalGeneration},
		{"unknown member", "g", "zz", gen, errUnknownMemberID},
		{"simple commit to live group", "g", "", -1, errUnknownMemberID},
		{"simple commit to new group", "fresh", "", -1, 0},
		{"member commit to unknown group", "other", "m", 3, errIllegalGeneration},
	} {
		if got := h.c.ValidateCommit(tc.group, tc.id, tc.gen, nil); got != tc.want {
			t.Fatalf("commit %s: %d want %d", tc.name, got, tc.want)
		}
	}
	if st, ok := h.c.State("fresh"); !ok || st != StateEmpty {
		t.Fatalf("simple commit should create an Empty group: %s %v", st, ok)
	}
	if got := h.c.ValidateCommit("fresh", "", -1, nil); got != 0 {
		t.Fatalf("simple commit to empty group: %d", got)
	}

	// A new member starts a rebalance: heartbeats say REBALANCE_IN_PROGRESS,
	// syncs are refused, commits at the current generation still pass.
	nw := h.joinNew("g", nil)
	h.wantState("g", StatePreparingRebalance)
	if got := h.c.Heartbeat(hbReq("g", follower, gen)).ErrorCode; got != errRebalanceInProgress {
		t.Fatalf("heartbeat while preparing: %d", got)
	}
	if w := h.c.startSync(syncReq(5, "g", follower, gen, nil)); w.resp.ErrorCode != errRebalanceInProgress {
		t.Fatalf("sync while preparing: %d", w.resp.ErrorCode)
	}
	if got := h.c.ValidateCommit("g", follower, gen, nil); got != 0 {
		t.Fatalf("commit while preparing: %d", got)
	}
	lw := h.c.startJoin(joinReq(9, "g", leader, nil), "cli", "h")
	fw := h.c.startJoin(joinReq(9, "g", follower, nil), "cli", "h")
	ids2, gen2 := h.finishJoins([]*joinWaiter{nw, lw, fw})
	if gen2 != gen+1 || ids2[0] != leader {
		t.Fatalf("gen %d leader %s; want %d %s", gen2, ids2[0], gen+1, leader)
	}
	if len(lw.resp.Members) != 3 || len(fw.resp.Members) != 0 {
		t.Fatalf("members: leader %d follower %d", len(lw.resp.Members), len(fw.resp.Members))
	}
	h.wantState("g", StateCompletingRebalance)
	if got := h.c.ValidateCommit("g", follower, gen2, nil); got != errRebalanceInProgress {
		t.Fatalf("commit while completing: %d", got)
	}
	if got := h.c.Heartbeat(hbReq("g", follower, gen2)).ErrorCode; got != 0 {
		t.Fatalf("heartbeat while completing: %d", got)
	}
}

func TestConcurrentJoin(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const n = 3
	resps := make([]*kmsg.JoinGroupResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.c.JoinGroup(ctx, joinReq(9, "g", "", nil, "cooperative-sticky", "range"), fmt.Sprintf("c%d", i), "h")
			if r.ErrorCode != errMemberIDRequired {
				t.Errorf("first join: %d", r.ErrorCode)
				return
			}
			resps[i] = h.c.JoinGroup(ctx, joinReq(9, "g", r.MemberID, nil, "cooperative-sticky", "range"), fmt.Sprintf("c%d", i), "h")
		}()
	}
	waitMembers(t, h.c, "g", n)
	h.advance(testDelay)
	wg.Wait()
	var leader string
	for _, r := range resps {
		if r == nil || r.ErrorCode != 0 || r.Generation != 1 || *r.Protocol != "cooperative-sticky" || *r.ProtocolType != "consumer" {
			t.Fatalf("join response %+v", r)
		}
		if leader != "" && r.LeaderID != leader {
			t.Fatalf("two leaders %s %s", leader, r.LeaderID)
		}
		leader = r.LeaderID
		if r.MemberID == leader {
			if len(r.Members) != n {
				t.Fatalf("leader got %d members", len(r.Members))
			}
			for _, m := range r.Members {
				if string(m.ProtocolMetadata) != "meta-cooperative-sticky" {
					t.Fatalf("metadata %q", m.ProtocolMetadata)
				}
			}
		} else if len(r.Members) != 0 {
			t.Fatalf("follower got members")
		}
	}
	syncs := make([]*kmsg.SyncGroupResponse, n)
	for i, r := range resps {
		if r.MemberID == leader {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			syncs[i] = h.c.SyncGroup(ctx, syncReq(3, "g", r.MemberID, 1, nil))
		}()
	}
	waitSyncs(t, h.c, "g", n-1)
	assign := map[string][]byte{}
	for _, r := range resps {
		assign[r.MemberID] = []byte("for-" + r.MemberID)
	}
	for i, r := range resps {
		if r.MemberID == leader {
			syncs[i] = h.c.SyncGroup(ctx, syncReq(3, "g", leader, 1, assign))
		}
	}
	wg.Wait()
	for i, s := range syncs {
		if s.ErrorCode != 0 || string(s.MemberAssignment) != "for-"+resps[i].MemberID {
			t.Fatalf("sync %d: %d %q", i, s.ErrorCode, s.MemberAssignment)
		}
	}
	d := h.c.DescribeGroups(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"g", "nope"}})
	g := d.Groups[0]
	if g.State != StateStable || g.Protocol != "cooperative-sticky" || g.ProtocolType != "consumer" || len(g.Members) != n {
		t.Fatalf("describe %+v", g)
	}
	for _, m := range g.Members {
		if string(m.MemberAssignment) != "for-"+m.MemberID || m.ClientHost != "h" || m.ClientID == "" {
			t.Fatalf("describe member %+v", m)
		}
	}
	if d.Groups[1].State != StateDead || d.Groups[1].ErrorCode != 0 {
		t.Fatalf("unknown group %+v", d.Groups[1])
	}
}

// waitMembers waits (in real time; no coordinator timing depends on it)
// until n members are blocked in JoinGroup.
func waitMembers(t *testing.T, c *Coordinator, group string, n int) {
	t.Helper()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.groups[group]
		k := 0
		if g != nil {
			for _, m := range g.members {
				if m.join != nil {
					k++
				}
			}
		}
		return k == n
	})
}

func waitSyncs(t *testing.T, c *Coordinator, group string, n int) {
	t.Helper()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		k := 0
		for _, m := range c.groups[group].members {
			if m.sync != nil {
				k++
			}
		}
		return k == n
	})
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for i := 0; !f(); i++ {
		if i > 5000 {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSessionTimeoutTriggersRebalance(t *testing.T) {
	var emptied []string
	h := newHarness(t, WithOnEmpty(func(g string) { emptied = append(emptied, g) }))
	ids, gen := h.stable("g", 2)
	a, b := ids[0], ids[1]
	for range 4 {
		h.advance(3 * time.Second)
		h.c.Heartbeat(hbReq("g", a, gen))
	}
	h.wantState("g", StatePreparingRebalance)
	if got := h.c.Heartbeat(hbReq("g", b, gen)).ErrorCode; got != errUnknownMemberID {
		t.Fatalf("expired member heartbeat: %d", got)
	}
	if got := h.c.Heartbeat(hbReq("g", a, gen)).ErrorCode; got != errRebalanceInProgress {
		t.Fatalf("survivor heartbeat: %d", got)
	}
	w := h.c.startJoin(joinReq(9, "g", a, nil), "cli", "h")
	ids2, gen2 := h.finishJoins([]*joinWaiter{w})
	if gen2 != gen+1 || len(ids2) != 1 || len(w.resp.Members) != 1 {
		t.Fatalf("gen %d ids %v", gen2, ids2)
	}
	h.syncAll("g", ids2, gen2)
	h.advance(testSession)
	h.wantState("g", StateEmpty)
	if len(emptied) != 1 || emptied[0] != "g" {
		t.Fatalf("onEmpty calls %v", emptied)
	}
}

func TestRebalanceTimeoutDropsLaggards(t *testing.T) {
	h := newHarness(t)
	ids, gen := h.stable("g", 3)
	nw := h.joinNew("g", nil)
	lw := h.c.startJoin(joinReq(9, "g", ids[0], nil), "cli", "h")
	// ids[1] keeps heartbeating but never rejoins; ids[2] is silent.
	for range 3 {
		h.advance(testRebal / 4)
		h.c.Heartbeat(hbReq("g", ids[1], gen))
	}
	if done(lw) {
		t.Fatal("completed before the rebalance timeout")
	}
	h.advance(testRebal / 4)
	got, gen2 := h.finishJoins([]*joinWaiter{lw, nw})
	if gen2 != gen+1 || len(got) != 2 || got[0] != ids[0] {
		t.Fatalf("got %v gen %d", got, gen2)
	}
	if c := h.c.Heartbeat(hbReq("g", ids[1], gen)).ErrorCode; c != errUnknownMemberID {
		t.Fatalf("laggard heartbeat %d", c)
	}
}

func TestLeaderNeverSyncs(t *testing.T) {
	h := newHarness(t)
	w1, w2 := h.joinNew("g", nil), h.joinNew("g", nil)
	h.advance(testDelay)
	ids, gen := h.finishJoins([]*joinWaiter{w1, w2})
	fs := h.c.startSync(syncReq(5, "g", ids[1], gen, nil))
	for range 3 {
		h.advance(2 * time.Second)
		h.c.Heartbeat(hbReq("g", ids[0], gen))
	}
	if !done(fs) || fs.resp.ErrorCode != errRebalanceInProgress {
		t.Fatalf("follower sync: done=%v %d", done(fs), fs.resp.ErrorCode)
	}
	h.wantState("g", StatePreparingRebalance)
}

func TestLeaveTriggersRebalance(t *testing.T) {
	h := newHarness(t)
	ids, gen := h.stable("g", 2)
	lr := h.c.LeaveGroup(&kmsg.LeaveGroupRequest{Version: 1, Group: "g", MemberID: ids[0]})
	if lr.ErrorCode != 0 {
		t.Fatalf("leave %d", lr.ErrorCode)
	}
	h.wantState("g", StatePreparingRebalance)
	if c := h.c.Heartbeat(hbReq("g", ids[1], gen)).ErrorCode; c != errRebalanceInProgress {
		t.Fatalf("heartbeat %d", c)
	}
	w := h.c.startJoin(joinReq(9, "g", ids[1], nil), "cli", "h")
	got, gen2 := h.finishJoins([]*joinWaiter{w})
	if gen2 != gen+1 || got[0] != ids[1] {
		t.Fatalf("new leader %v gen %d", got, gen2)
	}
	lr = h.c.LeaveGroup(&kmsg.LeaveGroupRequest{Version: 0, Group: "g", MemberID: "zz"})
	if lr.ErrorCode != errUnknownMemberID {
		t.Fatalf("unknown leave %d", lr.ErrorCode)
	}
	lr = h.c.LeaveGroup(&kmsg.LeaveGroupRequest{Version: 5, Group: "g", Members: []kmsg.LeaveGroupRequestMember{{MemberID: ids[1]}, {MemberID: "zz"}}})
	if lr.ErrorCode != 0 || len(lr.Members) != 2 || lr.Members[0].ErrorCode != 0 || lr.Members[1].ErrorCode != errUnknownMemberID {
		t.Fatalf("batch leave %+v", lr)
	}
	h.wantState("g", StateEmpty)
}

func TestStaticMemberReplacement(t *testing.T) {
	h := newHarness(t)
	inst := ptr("host-1")
	w1 := h.joinNew("g", inst)
	w2 := h.joinNew("g", nil)
	h.advance(testDelay)
	ids, gen := h.finishJoins([]*joinWaiter{w1, w2})
	h.syncAll("g", ids, gen)
	old := w1.resp.MemberID

	// The instance restarts: same instance id, no member id.
	w := h.c.startJoin(joinReq(9, "g", "", inst), "cli", "h")
	if !done(w) || w.resp.ErrorCode != 0 || w.resp.Generation != gen || w.resp.MemberID == old {
		t.Fatalf("static rejoin %+v", w.resp)
	}
	h.wantState("g", StateStable)
	newID := w.resp.MemberID
	s := h.c.startSync(syncReq(5, "g", newID, gen, nil))
	if s.resp.ErrorCode != 0 || string(s.resp.MemberAssignment) != "a-"+old {
		t.Fatalf("replacement keeps the assignment: %d %q", s.resp.ErrorCode, s.resp.MemberAssignment)
	}
	hb := hbReq("g", old, gen)
	hb.InstanceID = inst
	if c := h.c.Heartbeat(hb).ErrorCode; c != errFencedInstanceID {
		t.Fatalf("old id heartbeat: %d", c)
	}
	if c := h.c.ValidateCommit("g", old, gen, inst); c != errFencedInstanceID {
		t.Fatalf("old id commit: %d", c)
	}
	if c := h.c.startJoin(joinReq(9, "g", old, inst), "cli", "h").resp.ErrorCode; c != errFencedInstanceID {
		t.Fatalf("old id join: %d", c)
	}
	if c := h.c.ValidateCommit("g", newID, gen, inst); c != 0 {
		t.Fatalf("new id commit: %d", c)
	}
	lr := h.c.LeaveGroup(&kmsg.LeaveGroupRequest{Version: 4, Group: "g", Members: []kmsg.LeaveGroupRequestMember{
		{InstanceID: ptr("nope")}, {MemberID: old, InstanceID: inst}, {InstanceID: inst},
	}})
	want := []int16{errUnknownMemberID, errFencedInstanceID, 0}
	for i, m := range lr.Members {
		if m.ErrorCode != want[i] {
			t.Fatalf("leave %d: %d want %d", i, m.ErrorCode, want[i])
		}
	}
	h.wantState("g", StatePreparingRebalance)
}

func TestStaticReplacementDuringRebalanceFencesWaiter(t *testing.T) {
	h := newHarness(t)
	inst := ptr("i")
	w1 := h.joinNew("g", inst)
	w2 := h.c.startJoin(joinReq(9, "g", "", inst), "cli", "h")
	if !done(w1) || w1.resp.ErrorCode != errFencedInstanceID {
		t.Fatalf("old waiter: done=%v %d", done(w1), w1.resp.ErrorCode)
	}
	h.advance(testDelay)
	if _, gen := h.finishJoins([]*joinWaiter{w2}); gen != 1 {
		t.Fatalf("gen %d", gen)
	}
}

func TestCancelledJoin(t *testing.T) {
	h := newHarness(t)
	ids, gen := h.stable("g", 2)
	// A new member gives up: it is forgotten.
	nw := h.joinNew("g", nil)
	h.c.cancelJoin(nw)
	if c := nw.resp.ErrorCode; c != errRebalanceInProgress {
		t.Fatalf("cancelled %d", c)
	}
	// An existing member gives up: the round waits, then drops it.
	b := h.c.startJoin(joinReq(9, "g", ids[1], nil), "cli", "h")
	h.c.cancelJoin(b)
	a := h.c.startJoin(joinReq(9, "g", ids[0], nil), "cli", "h")
	if done(a) {
		t.Fatal("completed without b")
	}
	h.advance(testRebal)
	got, gen2 := h.finishJoins([]*joinWaiter{a})
	if len(got) != 1 || gen2 != gen+1 {
		t.Fatalf("got %v gen %d", got, gen2)
	}

	// Blocking API with a cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var r *kmsg.JoinGroupResponse
	go func() {
		defer wg.Done()
		r = h.c.JoinGroup(ctx, joinReq(3, "h", "", nil), "c", "h")
	}()
	waitMembers(t, h.c, "h", 1)
	cancel()
	wg.Wait()
	if r.ErrorCode == 0 {
		t.Fatal("cancelled join succeeded")
	}
	h.advance(testDelay)
	h.wantState("h", StateEmpty)
}

func TestListDeleteDescribe(t *testing.T) {
	var deleted []string
	h := newHarness(t, WithOnDelete(func(g string) { deleted = append(deleted, g) }))
	h.stable("busy", 1)
	if c := h.c.EnsureGroup("idle"); c != 0 {
		t.Fatal(c)
	}
	lr := h.c.ListGroups(&kmsg.ListGroupsRequest{Version: 5})
	if len(lr.Groups) != 2 || lr.Groups[0].Group != "busy" || lr.Groups[0].GroupState != StateStable || lr.Groups[0].GroupType != "classic" || lr.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list %+v", lr.Groups)
	}
	lr = h.c.ListGroups(&kmsg.ListGroupsRequest{Version: 4, StatesFilter: []string{"empty"}})
	if len(lr.Groups) != 1 || lr.Groups[0].Group != "idle" {
		t.Fatalf("states filter %+v", lr.Groups)
	}
	if lr = h.c.ListGroups(&kmsg.ListGroupsRequest{Version: 5, TypesFilter: []string{"consumer"}}); len(lr.Groups) != 0 {
		t.Fatalf("types filter %+v", lr.Groups)
	}
	if lr = h.c.ListGroups(&kmsg.ListGroupsRequest{Version: 5, TypesFilter: []string{"Classic"}}); len(lr.Groups) != 2 {
		t.Fatalf("types filter classic %+v", lr.Groups)
	}
	dr := h.c.DeleteGroups(&kmsg.DeleteGroupsRequest{Version: 2, Groups: []string{"busy", "idle", "nope", ""}})
	want := []int16{errNonEmptyGroup, 0, errGroupIDNotFound, errInvalidGroupID}
	for i, g := range dr.Groups {
		if g.ErrorCode != want[i] {
			t.Fatalf("delete %s: %d want %d", g.Group, g.ErrorCode, want[i])
		}
	}
	if len(deleted) != 1 || deleted[0] != "idle" {
		t.Fatalf("onDelete %v", deleted)
	}
	if st, ok := h.c.State("idle"); ok || st != StateDead {
		t.Fatalf("deleted group state %s %v", st, ok)
	}
	d := h.c.DescribeGroups(&kmsg.DescribeGroupsRequest{Version: 0, Groups: []string{"idle"}})
	if d.Groups[0].State != StateDead {
		t.Fatalf("describe deleted %+v", d.Groups[0])
	}
}

func TestPendingMemberIDExpires(t *testing.T) {
	h := newHarness(t)
	h.stable("g", 1)
	w := h.c.startJoin(joinReq(9, "g", "", nil), "late", "h")
	if w.resp.ErrorCode != errMemberIDRequired {
		t.Fatal(w.resp.ErrorCode)
	}
	h.advance(testSession + time.Second)
	if c := h.c.startJoin(joinReq(9, "g", w.resp.MemberID, nil), "late", "h").resp.ErrorCode; c != errUnknownMemberID {
		t.Fatalf("expired pending id: %d", c)
	}
	// A pending id can also leave.
	w = h.c.startJoin(joinReq(9, "g", "", nil), "late", "h")
	if lr := h.c.LeaveGroup(&kmsg.LeaveGroupRequest{Version: 2, Group: "g", MemberID: w.resp.MemberID}); lr.ErrorCode != 0 {
		t.Fatalf("leave pending: %d", lr.ErrorCode)
	}
}
