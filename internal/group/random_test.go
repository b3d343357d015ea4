package group

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// simClient is one simulated consumer driving the coordinator through its
// non-blocking internals.
type simClient struct {
	name     string
	static   *string
	version  int16
	memberID string
	gen      int32 // generation of the last successful join
	leader   bool
	members  []string // from the last successful join, if leader
	join     *joinWaiter
	sync     *syncWaiter
}

func TestRandomized(t *testing.T) {
	seeds := 30
	steps := 1500
	if testing.Short() {
		seeds, steps = 5, 500
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRandom(t, uint64(seed), steps) })
	}
}

func runRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f6f6e))
	h := newHarness(t)
	const group = "g"
	var clients []*simClient
	for i := range 6 {
		c := &simClient{name: fmt.Sprintf("c%d", i), version: 9}
		if i == 3 {
			c.version = 3 // pre-KIP-394: ids assigned on first join
		}
		if i >= 4 {
			c.static = ptr(fmt.Sprintf("inst-%d", i))
		}
		clients = append(clients, c)
	}
	// leaders maps generation -> leader. A static member keeps leading
	// across a restart that changes its member id without a new
	// generation, so static leaders are keyed by client name.
	leaders := map[int32]string{}
	leaderKey := func(id string) string {
		name, _, _ := strings.Cut(id, "-")
		for _, c := range clients {
			if c.name == name && c.static != nil {
				return name
			}
		}
		return id
	}
	protocols := map[int32]string{} // generation -> protocol
	var lastGen, lastCompleted int32
	stableSeen := 0
	var log []string

	fail := func(format string, args ...any) {
		t.Helper()
		for _, l := range log[max(0, len(log)-30):] {
			t.Log(l)
		}
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}

	// collect consumes finished waiters and checks what they say.
	collect := func() {
		for _, c := range clients {
			if w := c.join; w != nil && done(w) {
				c.join = nil
				r := w.resp
				switch r.ErrorCode {
				case 0:
					if l, ok := leaders[r.Generation]; ok && l != leaderKey(r.LeaderID) {
						fail("generation %d has leaders %s and %s", r.Generation, l, r.LeaderID)
					}
					if p, ok := protocols[r.Generation]; ok && p != *r.Protocol {
						fail("generation %d has protocols %s and %s", r.Generation, p, *r.Protocol)
					}
					leaders[r.Generation], protocols[r.Generation] = leaderKey(r.LeaderID), *r.Protocol
					if r.Generation < c.gen {
						fail("%s generation went back %d -> %d", c.name, c.gen, r.Generation)
					}
					c.memberID, c.gen = r.MemberID, r.Generation
					c.leader = r.LeaderID == r.MemberID
					c.members = c.members[:0]
					for _, m := range r.Members {
						c.members = append(c.members, m.MemberID)
					}
				case errMemberIDRequired:
					c.memberID = r.MemberID
				case errUnknownMemberID, errFencedInstanceID:
					c.memberID = ""
				}
				log = append(log, fmt.Sprintf("  %s join -> code %d gen %d member %s leader %s", c.name, r.ErrorCode, r.Generation, r.MemberID, r.LeaderID))
			}
			if w := c.sync; w != nil && done(w) {
				c.sync = nil
				if w.resp.MemberAssignment == nil {
					fail("%s nil assignment", c.name)
				}
				if w.resp.ErrorCode == errUnknownMemberID || w.resp.ErrorCode == errFencedInstanceID {
					c.memberID = ""
				}
				log = append(log, fmt.Sprintf("  %s sync -> code %d %q", c.name, w.resp.ErrorCode, w.resp.MemberAssignment))
			}
		}
	}

	check := func() {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		g := h.c.groups[group]
		if g == nil {
			return
		}
		if g.generation < lastGen {
			fail("group generation went back %d -> %d", lastGen, g.generation)
		}
		lastGen = g.generation
		if (g.state == StateCompletingRebalance || g.state == StateStable) && g.generation != lastCompleted {
			if g.generation < lastCompleted {
				fail("completed generation %d after %d", g.generation, lastCompleted)
			}
			lastCompleted = g.generation
		}
		if g.state == StateStable {
			stableSeen++
		}
		if len(g.order) != len(g.members) {
			fail("order %d members %d", len(g.order), len(g.members))
		}
		for inst, id := range g.statics {
			if m := g.members[id]; m == nil || m.instanceID == nil || *m.instanceID != inst {
				fail("static mapping %s -> %s dangling", inst, id)
			}
		}
		byID := map[string]*simClient{}
		for _, c := range clients {
			if c.memberID != "" {
				byID[c.memberID] = c
			}
		}
		for id, m := range g.members {
			if m.id != id {
				fail("member keyed %s has id %s", id, m.id)
			}
			if m.join != nil && g.state != StatePreparingRebalance {
				fail("join waiter in state %s", g.state)
			}
			if m.sync != nil && g.state != StateCompletingRebalance {
				fail("sync waiter in state %s", g.state)
			}
			switch g.state {
			case StateCompletingRebalance, StateStable:
				c := byID[id]
				if c == nil || c.gen != g.generation {
					fail("member %s of generation %d was not answered in it (client %+v)", id, g.generation, c)
				}
				if g.state == StateStable && m.assignment == nil {
					fail("stable member %s has no assignment", id)
				}
			}
		}
		switch g.state {
		case StateCompletingRebalance, StateStable:
			if g.members[g.leader] == nil {
				fail("leader %q not a member", g.leader)
			}
			if leaders[g.generation] != leaderKey(g.leader) {
				fail("leader %s, but generation %d answered leader %s", g.leader, g.generation, leaders[g.generation])
			}
		case StateEmpty:
			if len(g.members) != 0 {
				fail("empty group has members")
			}
		}
	}

	for step := range steps {
		c := clients[rng.IntN(len(clients))]
		protos := []string{"range"}
		if rng.IntN(4) == 0 {
			protos = []string{"sticky", "range"}
		}
		switch op := rng.IntN(10); {
		case op < 3 && c.join == nil && c.sync == nil:
			version := c.version
			r := joinReq(version, group, c.memberID, c.static, protos...)
			if c.static != nil && rng.IntN(3) == 0 {
				r.MemberID = "" // restart of a static member
			}
			log = append(log, fmt.Sprintf("%d %s join v%d member %q", step, c.name, version, r.MemberID))
			c.join = h.c.startJoin(r, c.name, "h")
		case op < 5 && c.memberID != "" && c.join == nil && c.sync == nil && c.gen > 0:
			var assign map[string][]byte
			if c.leader {
				assign = map[string][]byte{}
				for _, id := range c.members {
					assign[id] = []byte(id)
				}
			}
			log = append(log, fmt.Sprintf("%d %s sync gen %d leader %v", step, c.name, c.gen, c.leader))
			c.sync = h.c.startSync(syncReq(5, group, c.memberID, c.gen, assign))
		case op < 7 && c.memberID != "":
			hb := hbReq(group, c.memberID, c.gen)
			hb.InstanceID = c.static
			code := h.c.Heartbeat(hb).ErrorCode
			log = append(log, fmt.Sprintf("%d %s heartbeat -> %d", step, c.name, code))
			if code == errUnknownMemberID || code == errFencedInstanceID {
				c.memberID = ""
			}
		case op == 7 && c.memberID != "" && rng.IntN(3) == 0:
			req := &kmsg.LeaveGroupRequest{Version: 5, Group: group, Members: []kmsg.LeaveGroupRequestMember{{MemberID: c.memberID, InstanceID: c.static}}}
			lr := h.c.LeaveGroup(req)
			log = append(log, fmt.Sprintf("%d %s leave -> %d", step, c.name, lr.Members[0].ErrorCode))
			c.memberID = ""
		case op == 8 && (c.join != nil || c.sync != nil):
			log = append(log, fmt.Sprintf("%d %s cancel", step, c.name))
			if c.join != nil {
				h.c.cancelJoin(c.join)
			}
			if c.sync != nil {
				h.c.cancelSync(c.sync)
			}
		default:
			d := time.Duration(rng.IntN(3000)) * time.Millisecond
			log = append(log, fmt.Sprintf("%d advance %v", step, d))
			h.advance(d)
		}
		collect()
		check()
	}
	if stableSeen == 0 {
		t.Errorf("seed %d: never Stable", seed)
	}
	if len(leaders) < 3 {
		t.Errorf("seed %d: only %d generations completed; the walk is too tame", seed, len(leaders))
	}
}
