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
