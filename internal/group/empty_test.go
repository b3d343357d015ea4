package group

import (
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEmptyGroups checks when each kind of group counts as empty, and since
// when: offsets retention is measured from that time.
func TestEmptyGroups(t *testing.T) {
	h := newConsumerHarness(t)
	want := func(step string, exp map[string]time.Time) {
		t.Helper()
		if got := h.c.EmptyGroups(); !maps.Equal(got, exp) {
			t.Fatalf("%s: EmptyGroups = %v, want %v", step, got, exp)
		}
	}
	t0 := h.clk.Now()
	h.c.EnsureGroup("offsets-only")
	want("registered", map[string]time.Time{"offsets-only": t0})

	// A classic group is empty from its creation until its first member
	// joins, and again from its last member's leave.
	h.clk.add(time.Minute)
	ids, _ := h.stable("classic", 1)
	want("classic member", map[string]time.Time{"offsets-only": t0})
	t1 := h.clk.add(time.Minute)
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version = 5
	leave.Group = "classic"
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: ids[0]}}
	if r := h.c.LeaveGroup(leave); r.ErrorCode != 0 || r.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %+v", r)
	}
	want("classic left", map[string]time.Time{"offsets-only": t0, "classic": t1})

	// A consumer-protocol group: empty once its last member leaves or
	// expires, not before.
	tp := newTopics("t", 4)
	twoMembers(t, h, tp)
	h.advance(time.Second)
	h.hb(cleave("g", "a", -1), tp, 0)
	want("one of two left", map[string]time.Time{"offsets-only": t0, "classic": t1})
	h.advance(testSession / 2)
	t2 := h.clk.add(testSession)
	h.c.Tick(t2) // b's session expires now
	want("consumer group expired", map[string]time.Time{"offsets-only": t0, "classic": t1, "g": t2})

	// A rejoin makes it non-empty again; Reset forgets everything, and
	// groups registered after it are empty since then.
	h.hb(cjoin("g", "c", "t"), tp, 0)
	want("rejoined", map[string]time.Time{"offsets-only": t0, "classic": t1})
	t3 := h.clk.add(time.Hour)
	h.c.Reset()
	want("reset", map[string]time.Time{})
	h.c.EnsureGroup("g")
	want("after reset", map[string]time.Time{"g": t3})
}

// TestDeleteEmpty: the retention pass deletes a group only if it is still
// empty since the time it saw, so a join (or a KIP-394 member id handed
// out) in between saves it.
func TestDeleteEmpty(t *testing.T) {
	h := newConsumerHarness(t)
	h.c.EnsureGroup("a")
	h.c.EnsureGroup("b")
	h.c.EnsureGroup("c")
	seen := h.c.EmptyGroups()

	// b gets a KIP-394 member id (its first JoinGroup) and is no longer
	// listed as empty; c gets a consumer-protocol member.
	first := h.c.startJoin(joinReq(9, "b", "", nil), "cli", "/10.0.0.1")
	if !done(first) || first.resp.ErrorCode != errMemberIDRequired {
		t.Fatalf("first join: %+v", first.resp)
	}
	if _, ok := h.c.EmptyGroups()["b"]; ok {
		t.Fatal("a group with a member id awaiting its second JoinGroup is listed as empty")
	}
	tp := newTopics("t", 1)
	h.hb(cjoin("c", "m", "t"), tp, 0)

	got := h.c.DeleteEmpty(seen)
	if len(got) != 1 || got[0] != "a" {
		t.Fatalf("deleted %v, want [a]", got)
	}
	for _, g := range []string{"b", "c"} {
		if _, ok := h.c.State(g); !ok {
			t.Fatalf("%s was deleted", g)
		}
	}
	// c empties again, later: the old time no longer matches.
	h.clk.add(time.Minute)
	h.hb(cleave("c", "m", -1), tp, 0)
	if got := h.c.DeleteEmpty(map[string]time.Time{"c": seen["c"]}); len(got) != 0 {
		t.Fatalf("deleted %v with a stale empty time", got)
	}
	if got := h.c.DeleteEmpty(h.c.EmptyGroups()); len(got) != 1 || got[0] != "c" {
		t.Fatalf("deleted %v, want [c]", got)
	}
}
