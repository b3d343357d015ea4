package group

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeTopics is a Topics the tests edit directly.
type fakeTopics struct {
	byName map[string]TopicMeta
	gen    int
}

func newTopics(kv ...any) *fakeTopics {
	f := &fakeTopics{byName: map[string]TopicMeta{}}
	for i := 0; i < len(kv); i += 2 {
		f.set(kv[i].(string), int32(kv[i+1].(int)))
	}
	return f
}

// set creates a topic or changes its partition count, keeping its id.
func (f *fakeTopics) set(name string, parts int32) {
	tm, ok := f.byName[name]
	if !ok {
		f.gen++
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", name, f.gen))
		tm = TopicMeta{Name: name, ID: [16]byte(sum[:16])}
	}
	tm.Partitions = parts
	f.byName[name] = tm
}

// recreate deletes and recreates a topic: same name, new id.
func (f *fakeTopics) recreate(name string, parts int32) {
	delete(f.byName, name)
	f.set(name, parts)
}

func (f *fakeTopics) Topic(name string) (TopicMeta, bool) {
	tm, ok := f.byName[name]
	return tm, ok
}

func (f *fakeTopics) TopicByID(id [16]byte) (TopicMeta, bool) {
	for _, tm := range f.byName {
		if tm.ID == id {
			return tm, true
		}
	}
	return TopicMeta{}, false
}

func (f *fakeTopics) Names() []string {
	var out []string
	for n := range f.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (f *fakeTopics) id(name string) [16]byte { return f.byName[name].ID }

// tp names one partition for the tests.
func (f *fakeTopics) tp(name string, p int32) topicPart { return topicPart{f.id(name), p} }

// all lists every partition of the named topics.
func (f *fakeTopics) all(names ...string) partSet {
	s := partSet{}
	for _, n := range names {
		for p := range f.byName[n].Partitions {
			s[f.tp(n, p)] = struct{}{}
		}
	}
	return s
}

func newConsumerHarness(t *testing.T, opts ...Option) *harness {
	return newHarness(t, append([]Option{WithConsumerSessionTimeout(testSession)}, opts...)...)
}

// cjoin is a v1 join (epoch 0, full request).
func cjoin(group, member string, topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID = group, member
	r.RebalanceTimeoutMillis = int32(testRebal / time.Millisecond)
	r.SubscribedTopicNames = append([]string{}, topics...)
	r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return r
}

// ckeep is a keepalive heartbeat: nothing but the epoch.
// cjoinStatic is cjoin for a static member with instance id instance.
func cjoinStatic(group, member, instance string, topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	r := cjoin(group, member, topics...)
	r.InstanceID = ptr(instance)
	return r
}

func ckeep(group, member string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID, r.MemberEpoch = group, member, epoch
	return r
}

// cowned is a heartbeat reporting the partitions the member owns.
func cowned(group, member string, epoch int32, owned partSet) *kmsg.ConsumerGroupHeartbeatRequest {
	r := ckeep(group, member, epoch)
	r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	owned.byTopic(func(id [16]byte, parts []int32) {
		r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: parts})
	})
	return r
}

func cleave(group, member string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	return ckeep(group, member, epoch)
}

// assigned reads a response's assignment; nil when it carries none.
func assigned(resp *kmsg.ConsumerGroupHeartbeatResponse) partSet {
	if resp.Assignment == nil {
		return nil
	}
	s := partSet{}
	for _, t := range resp.Assignment.Topics {
		if !slices.IsSorted(t.Partitions) {
			panic("unsorted partitions in an assignment")
		}
		for _, p := range t.Partitions {
			s[topicPart{t.TopicID, p}] = struct{}{}
		}
	}
	return s
}

// hb sends req and fails the test unless it answers want.
func (h *harness) hb(req *kmsg.ConsumerGroupHeartbeatRequest, tp Topics, want int16) *kmsg.ConsumerGroupHeartbeatResponse {
	h.t.Helper()
	resp := h.c.ConsumerGroupHeartbeat(req, tp, "cli-"+req.MemberID, "/10.0.0.1")
	if resp.ErrorCode != want {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		h.t.Fatalf("heartbeat %s epoch %d: error %d (%s), want %d", req.MemberID, req.MemberEpoch, resp.ErrorCode, msg, want)
	}
	return resp
}

// converge heartbeats every live member (each acknowledging what it was
// asked to give up) until all are stable at the target epoch, and checks
// that no partition is held by two members.
func (h *harness) converge(group string, tp Topics) {
	h.t.Helper()
	for range 20 {
		g := h.cgroup(group)
		done := true
		for _, id := range g.sortedIDs() {
			m := g.members[id]
			if m.epoch < 0 {
				continue // a static member away (-2) keeps its reservation
			}
			if m.state != memberStable || m.epoch != g.assignEpoch || g.epoch != g.assignEpoch {
				done = false
			}
			h.hb(cowned(group, id, m.epoch, m.assigned.clone()), tp, 0)
		}
		held := map[topicPart]string{}
		for id, m := range g.members {
			for _, set := range []partSet{m.assigned, m.revoking} {
				for p := range set {
					if o, dup := held[p]; dup && o != id {
						h.t.Fatalf("partition %v held by %s and %s", p, o, id)
					}
					held[p] = id
				}
			}
		}
		if done {
			return
		}
	}
	h.t.Fatalf("group %s did not converge: state %s", group, h.cgroup(group).state())
}

func (h *harness) cgroup(id string) *cgroup {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.cgroups[id]
}

func (h *harness) describe(tp Topics, id string) kmsg.ConsumerGroupDescribeResponseGroup {
	h.t.Helper()
	r := h.c.ConsumerGroupDescribe(&kmsg.ConsumerGroupDescribeRequest{Version: 1, Groups: []string{id}}, tp)
	return r.Groups[0]
}

func wantSet(t *testing.T, what string, got, want partSet) {
	t.Helper()
	if !got.equal(want) {
		t.Fatalf("%s: got %v, want %v", what, got.sorted(), want.sorted())
	}
}

func wantEpoch(t *testing.T, resp *kmsg.ConsumerGroupHeartbeatResponse, want int32) {
	t.Helper()
	if resp.MemberEpoch != want {
		t.Fatalf("member epoch %d, want %d", resp.MemberEpoch, want)
	}
}

func union(sets ...partSet) partSet {
	out := partSet{}
	for _, s := range sets {
		for tp := range s {
			out[tp] = struct{}{}
		}
	}
	return out
}

func disjoint(a, b partSet) bool {
	for tp := range a {
		if b.has(tp) {
			return false
		}
	}
	return true
}

// twoMembers builds group g with members a (alone first) and b on topic t
// with 4 partitions, driven to Stable; it returns a's and b's partitions.
func twoMembers(t *testing.T, h *harness, tp *fakeTopics) (partSet, partSet) {
	t.Helper()
	ra := h.hb(cjoin("g", "a", "t"), tp, 0)
	wantEpoch(t, ra, 1)
	wantSet(t, "a alone", assigned(ra), tp.all("t"))

	rb := h.hb(cjoin("g", "b", "t"), tp, 0)
	wantEpoch(t, rb, 2)
	wantSet(t, "b before a revoked", assigned(rb), partSet{})
	if st, _ := h.c.State("g"); st != StateReconciling {
		t.Fatalf("state %s, want Reconciling", st)
	}

	// a is asked to revoke half, keeping its epoch.
	ra = h.hb(ckeep("g", "a", 1), tp, 0)
	wantEpoch(t, ra, 1)
	aKeep := assigned(ra)
	if len(aKeep) != 2 {
		t.Fatalf("a keeps %v", aKeep.sorted())
	}
	// Until a acknowledges, b gets none of them, and a keepalive acks nothing.
	for range 2 {
		rb = h.hb(ckeep("g", "b", 2), tp, 0)
		wantEpoch(t, rb, 2)
		if rb.Assignment != nil {
			t.Fatalf("b got %v before a revoked", assigned(rb).sorted())
		}
		ra = h.hb(ckeep("g", "a", 1), tp, 0)
		wantEpoch(t, ra, 1)
	}
	// Reporting owned partitions that still include a revoked one acks nothing.
	ra = h.hb(cowned("g", "a", 1, tp.all("t")), tp, 0)
	wantEpoch(t, ra, 1)
	if rb = h.hb(ckeep("g", "b", 2), tp, 0); rb.Assignment != nil {
		t.Fatalf("b got %v before a revoked", assigned(rb).sorted())
	}
	// a acknowledges: it moves to epoch 2, and b gets the rest.
	ra = h.hb(cowned("g", "a", 1, aKeep), tp, 0)
	wantEpoch(t, ra, 2)
	rb = h.hb(ckeep("g", "b", 2), tp, 0)
	wantEpoch(t, rb, 2)
	bGot := assigned(rb)
	if len(bGot) != 2 || !disjoint(aKeep, bGot) {
		t.Fatalf("a %v b %v", aKeep.sorted(), bGot.sorted())
	}
	wantSet(t, "a+b", union(aKeep, bGot), tp.all("t"))
	h.wantState("g", StateStable)
	return aKeep, bGot
}

func TestConsumerJoinRevokeConverge(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	twoMembers(t, h, tp)
	d := h.describe(tp, "g")
	if d.ErrorCode != 0 || d.State != StateStable || d.Epoch != 2 || d.AssignmentEpoch != 2 || len(d.Members) != 2 {
		t.Fatalf("describe %+v", d)
	}
	for _, m := range d.Members {
		if m.MemberEpoch != 2 || len(m.Assignment.TopicPartitions) != 1 || len(m.Assignment.TopicPartitions[0].Partitions) != 2 ||
			m.Assignment.TopicPartitions[0].Topic != "t" {
			t.Fatalf("member %+v", m)
		}
	}
}

func TestConsumerAssignmentOnlyWhenChanged(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 2)
	r := h.hb(cjoin("g", "a", "t"), tp, 0)
	if r.Assignment == nil || r.HeartbeatIntervalMillis != 5000 || r.MemberID == nil || *r.MemberID != "a" {
		t.Fatalf("join response %+v", r)
	}
	if r = h.hb(ckeep("g", "a", 1), tp, 0); r.Assignment != nil {
		t.Fatal("keepalive got an unchanged assignment")
	}
	if r = h.hb(cowned("g", "a", 1, tp.all("t")), tp, 0); r.Assignment != nil {
		t.Fatal("owned-only heartbeat got an unchanged assignment")
	}
	// A full request (rebalance timeout, subscription and owned partitions)
	// always gets the assignment back.
	full := cowned("g", "a", 1, tp.all("t"))
	full.RebalanceTimeoutMillis, full.SubscribedTopicNames = 1000, []string{"t"}
	if r = h.hb(full, tp, 0); r.Assignment == nil {
		t.Fatal("full request got no assignment")
	}
	wantSet(t, "full", assigned(r), tp.all("t"))
}

func TestConsumerLeave(t *testing.T) {
	var emptied []string
	h := newConsumerHarness(t, WithOnEmpty(func(g string) { emptied = append(emptied, g) }))
	tp := newTopics("t", 4)
	twoMembers(t, h, tp)
	r := h.hb(cleave("g", "b", -1), tp, 0)
	if r.MemberEpoch != -1 || r.MemberID == nil || *r.MemberID != "b" {
		t.Fatalf("leave response %+v", r)
	}
	h.wantState("g", StateAssigning)
	r = h.hb(ckeep("g", "a", 2), tp, 0)
	wantEpoch(t, r, 3)
	wantSet(t, "a after b left", assigned(r), tp.all("t"))
	h.wantState("g", StateStable)
	h.hb(ckeep("g", "b", 2), tp, errUnknownMemberID)

	if len(emptied) != 0 {
		t.Fatalf("onEmpty too early: %v", emptied)
	}
	h.hb(cleave("g", "a", -1), tp, 0)
	h.wantState("g", StateEmpty)
	if len(emptied) != 1 || emptied[0] != "g" {
		t.Fatalf("onEmpty %v", emptied)
	}
	// The empty group remains (its offsets too) and can be rejoined.
	r = h.hb(cjoin("g", "c", "t"), tp, 0)
	wantSet(t, "c", assigned(r), tp.all("t"))
	if r.MemberEpoch <= 3 {
		t.Fatalf("epoch went back to %d", r.MemberEpoch)
	}
}

func TestConsumerSessionTimeout(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	aKeep, _ := twoMembers(t, h, tp)
	// a keeps heartbeating, b goes silent.
	for range 3 {
		h.advance(testSession / 3)
		h.hb(cowned("g", "a", 2, aKeep), tp, 0)
	}
	h.advance(testSession / 3)
	if g := h.cgroup("g"); len(g.members) != 1 || g.members["a"] == nil {
		t.Fatalf("members after b's session expired: %v", g.sortedIDs())
	}
	r := h.hb(ckeep("g", "a", 2), tp, 0)
	wantEpoch(t, r, 3) // b's expiry bumped the epoch, a's heartbeat computed the target
	wantSet(t, "a after b expired", assigned(r), tp.all("t"))
	h.hb(ckeep("g", "b", 2), tp, errUnknownMemberID)
}

func TestConsumerRebalanceTimeoutFences(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	h.hb(cjoin("g", "a", "t"), tp, 0)
	h.hb(cjoin("g", "b", "t"), tp, 0)
	h.hb(ckeep("g", "a", 1), tp, 0) // asked to revoke; never does
	for range 4 {
		h.advance(testRebal/4 - time.Millisecond)
		h.hb(ckeep("g", "a", 1), tp, 0)
		h.hb(ckeep("g", "b", 2), tp, 0)
	}
	h.advance(4 * time.Millisecond)
	h.hb(ckeep("g", "a", 1), tp, errUnknownMemberID)
	r := h.hb(ckeep("g", "b", 2), tp, 0)
	wantEpoch(t, r, 3)
	wantSet(t, "b after a was fenced", assigned(r), tp.all("t"))
}

func TestConsumerStaticMember(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	join := func(member, instance string) *kmsg.ConsumerGroupHeartbeatRequest {
		return cjoinStatic("g", member, instance, "t")
	}
	r := h.hb(join("m1", "i1"), tp, 0)
	wantSet(t, "m1", assigned(r), tp.all("t"))
	h.hb(cjoin("g", "d", "t"), tp, 0)
	r = h.hb(ckeep("g", "m1", 1), tp, 0)
	m1 := assigned(r)
	h.hb(cowned("g", "m1", 1, m1), tp, 0)
	r = h.hb(ckeep("g", "d", 2), tp, 0)
	d := assigned(r)
	h.wantState("g", StateStable)

	// Another member cannot take the instance id while m1 is live.
	h.hb(join("m2", "i1"), tp, errUnreleasedInstanceID)
	// A static member must present its own member id.
	req := ckeep("g", "zz", 2)
	req.InstanceID = ptr("i1")
	h.hb(req, tp, errFencedInstanceID)

	// m1 leaves temporarily (franz-go omits the instance id): no epoch bump,
	// its partitions stay reserved.
	r = h.hb(cleave("g", "m1", -2), tp, 0)
	if r.MemberEpoch != -2 {
		t.Fatalf("static leave epoch %d", r.MemberEpoch)
	}
	g := h.cgroup("g")
	if g.epoch != 2 || g.members["m1"].epoch != -2 {
		t.Fatalf("group epoch %d, m1 epoch %d", g.epoch, g.members["m1"].epoch)
	}
	if r = h.hb(ckeep("g", "d", 2), tp, 0); r.Assignment != nil {
		t.Fatalf("d got %v while m1 was away", assigned(r).sorted())
	}
	// A heartbeat at m1's old epoch is fenced now.
	h.hb(ckeep("g", "m1", 2), tp, errFencedMemberEpoch)
	// The instance comes back as m2 and takes over m1's partitions at once.
	r = h.hb(join("m2", "i1"), tp, 0)
	wantEpoch(t, r, 2)
	wantSet(t, "m2 took over", assigned(r), m1)
	h.wantState("g", StateStable)
	if g.members["m1"] != nil || g.statics["i1"] != "m2" {
		t.Fatalf("members %v statics %v", g.sortedIDs(), g.statics)
	}

	// A static member that leaves and does not come back within the
	// session timeout is removed.
	req = cleave("g", "m2", -2)
	req.InstanceID = ptr("i1")
	h.hb(req, tp, 0)
	for range 3 {
		h.advance(testSession / 3)
		h.hb(cowned("g", "d", 2, d), tp, 0)
	}
	h.advance(time.Millisecond)
	r = h.hb(ckeep("g", "d", 2), tp, 0)
	wantSet(t, "d after i1 expired", assigned(r), tp.all("t"))
	// A dynamic member cannot leave temporarily.
	h.hb(cleave("g", "d", -2), tp, errInvalidRequest)
	// -1 with the instance id removes a static member for good.
	h.hb(join("m3", "i1"), tp, 0)
	req = cleave("g", "m3", -1)
	req.InstanceID = ptr("i1")
	h.hb(req, tp, 0)
	if g.members["m3"] != nil || g.statics["i1"] != "" {
		t.Fatal("m3 still there")
	}
}

// TestConsumerStaticTakeoverByLiveMember: a live member may not take over
// another member's reserved instance id (review finding: it left its own
// partitions owned by nobody and a later join with its old instance id
// dereferenced a missing member).
func TestConsumerStaticTakeoverByLiveMember(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	join := func(member, instance string) *kmsg.ConsumerGroupHeartbeatRequest {
		return cjoinStatic("g", member, instance, "t")
	}
	h.hb(join("s", "i2"), tp, 0)
	h.hb(join("x", "i1"), tp, 0)
	h.converge("g", tp)
	h.hb(cleave("g", "s", -2), tp, 0)
	h.hb(join("x", "i2"), tp, errInvalidRequest)
	h.hb(cjoin("g", "y", "t"), tp, 0)
	h.converge("g", tp)
	h.hb(cleave("g", "x", -1), tp, 0)
	h.hb(join("z", "i1"), tp, 0) // i1 is free again; must not crash
	h.converge("g", tp)
}

func TestConsumerEpochChecks(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	aKeep, bGot := twoMembers(t, h, tp)

	h.hb(ckeep("g", "a", 3), tp, errFencedMemberEpoch)
	h.hb(ckeep("g", "zz", 2), tp, errUnknownMemberID)
	h.hb(ckeep("nogroup", "a", 2), tp, errUnknownMemberID)
	// The previous epoch is accepted with owned partitions within the
	// assignment (the response bumping the epoch was lost)...
	r := h.hb(cowned("g", "a", 1, aKeep), tp, 0)
	wantEpoch(t, r, 2)
	r = h.hb(cowned("g", "a", 1, partSet{}), tp, 0)
	wantEpoch(t, r, 2)
	// ... but not without them, nor with partitions beyond it, nor older.
	h.hb(ckeep("g", "a", 1), tp, errFencedMemberEpoch)
	h.hb(cowned("g", "a", 1, union(aKeep, bGot)), tp, errFencedMemberEpoch)
	h.hb(cowned("g", "b", 1, bGot), tp, errFencedMemberEpoch) // b never was at epoch 1
	// A fenced member rejoins with the same id at epoch 0: re-admitted in
	// place, its partitions freed and handed back.
	r = h.hb(cjoin("g", "a", "t"), tp, 0)
	wantEpoch(t, r, 2)
	wantSet(t, "a rejoined", assigned(r), aKeep)
	h.wantState("g", StateStable)
	if g := h.cgroup("g"); g.epoch != 2 {
		t.Fatalf("rejoin in place bumped the epoch to %d", g.epoch)
	}

	// Leaves.
	h.hb(cleave("nogroup", "a", -1), tp, errGroupIDNotFound)
	h.hb(cleave("g", "zz", -1), tp, errUnknownMemberID)
}

func TestConsumerInvalidRequests(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	mod := func(f func(r *kmsg.ConsumerGroupHeartbeatRequest)) *kmsg.ConsumerGroupHeartbeatRequest {
		r := cjoin("g", "a", "t")
		f(r)
		return r
	}
	for name, c := range map[string]struct {
		req  *kmsg.ConsumerGroupHeartbeatRequest
		want int16
	}{
		"v1 empty member id":   {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }), errInvalidRequest},
		"blank member id":      {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "  " }), errInvalidRequest},
		"empty group":          {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" }), errInvalidRequest},
		"empty instance":       {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = ptr("") }), errInvalidRequest},
		"empty rack":           {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RackID = ptr("") }), errInvalidRequest},
		"no rebalance timeout": {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }), errInvalidRequest},
		"owned on join": {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: tp.id("t"), Partitions: []int32{0}}}
		}), errInvalidRequest},
		"nil owned on join":    {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Topics = nil }), errInvalidRequest},
		"no subscription":      {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }), errInvalidRequest},
		"epoch -3":             {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }), errInvalidRequest},
		"unknown assignor":     {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = ptr("sticky") }), errUnsupportedAssignor},
		"bad regex":            {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = ptr("(") }), errInvalidRegularExpression},
		"v0 empty id to leave": {mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Version, r.MemberID, r.MemberEpoch = 0, "", -1 }), errInvalidRequest},
	} {
		t.Run(name, func(t *testing.T) {
			r := h.c.ConsumerGroupHeartbeat(c.req, tp, "", "")
			if r.ErrorCode != c.want || r.ErrorMessage == nil || r.MemberID != nil || r.Assignment != nil {
				t.Fatalf("got %+v, want error %d", r, c.want)
			}
		})
	}
	if h.cgroup("g") != nil {
		t.Fatal("a failed join created the group")
	}
	// An empty subscription is a valid join: a member with nothing.
	r := h.hb(mod(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = []string{} }), tp, 0)
	wantSet(t, "empty subscription", assigned(r), partSet{})
	// v0 has no regex field: one set in the struct is ignored.
	v0 := cjoin("g", "b", "t")
	v0.Version, v0.SubscribedTopicRegex = 0, ptr("(")
	h.hb(v0, tp, 0)
}

func TestConsumerV0ServerNamesMember(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 2)
	req := cjoin("g", "", "t")
	req.Version = 0
	r := h.hb(req, tp, 0)
	if r.MemberID == nil || *r.MemberID == "" {
		t.Fatalf("no member id: %+v", r)
	}
	id := *r.MemberID
	k := ckeep("g", id, r.MemberEpoch)
	k.Version = 0
	if r = h.hb(k, tp, 0); *r.MemberID != id {
		t.Fatalf("member id changed to %s", *r.MemberID)
	}
}

func TestConsumerPartitionGrowth(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	aKeep, bGot := twoMembers(t, h, tp)
	tp.set("t", 6)
	r := h.hb(cowned("g", "a", 2, aKeep), tp, 0)
	wantEpoch(t, r, 3) // new metadata, new epoch; only additions, so no revocation
	a := assigned(r)
	if len(a) != 3 || !disjoint(a, bGot) {
		t.Fatalf("a %v", a.sorted())
	}
	r = h.hb(cowned("g", "b", 2, bGot), tp, 0)
	wantEpoch(t, r, 3)
	b := assigned(r)
	wantSet(t, "a+b after growth", union(a, b), tp.all("t"))
	h.wantState("g", StateStable)

	// A recreated topic (same name, new id) replaces the old partitions.
	tp.recreate("t", 2)
	r = h.hb(cowned("g", "a", 3, a), tp, 0)
	wantEpoch(t, r, 3) // must first give up the old topic's partitions
	wantSet(t, "a revoking the old topic", assigned(r), partSet{})
	r = h.hb(cowned("g", "a", 3, partSet{}), tp, 0)
	wantEpoch(t, r, 4)
	a = assigned(r)
	r = h.hb(cowned("g", "b", 3, partSet{}), tp, 0)
	wantSet(t, "a+b after recreate", union(a, assigned(r)), tp.all("t"))
}

func TestConsumerRegexSubscription(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("foo1", 2, "foo2", 1, "bar", 3, "xfoo", 1)
	req := cjoin("g", "a")
	req.SubscribedTopicNames, req.SubscribedTopicRegex = nil, ptr("foo.*")
	r := h.hb(req, tp, 0)
	wantSet(t, "regex", assigned(r), tp.all("foo1", "foo2")) // whole-name match: not xfoo
	tp.set("foo3", 2)
	r = h.hb(ckeep("g", "a", 1), tp, 0)
	wantEpoch(t, r, 2)
	wantSet(t, "regex after foo3", assigned(r), tp.all("foo1", "foo2", "foo3"))
	// Names and a regex together subscribe to both.
	req = cjoin("g", "b", "bar")
	req.SubscribedTopicRegex = ptr("nomatch")
	h.hb(req, tp, 0)
	d := h.describe(tp, "g")
	for _, m := range d.Members {
		switch m.MemberID {
		case "a":
			if m.SubscribedTopicRegex == nil || *m.SubscribedTopicRegex != "foo.*" || len(m.SubscribedTopics) != 0 {
				t.Fatalf("a %+v", m)
			}
		case "b":
			if len(m.TargetAssignment.TopicPartitions) != 1 || m.TargetAssignment.TopicPartitions[0].Topic != "bar" {
				t.Fatalf("b target %+v", m.TargetAssignment)
			}
		}
	}
	// Dropping the regex (empty string) unsubscribes.
	k := cowned("g", "a", 2, tp.all("foo1", "foo2", "foo3"))
	k.SubscribedTopicRegex = ptr("")
	r = h.hb(k, tp, 0)
	wantSet(t, "a revoking all", assigned(r), partSet{})
}

// targets returns every member's target assignment.
func (h *harness) targets(group string) map[string]partSet {
	g := h.cgroup(group)
	out := map[string]partSet{}
	for id := range g.members {
		out[id] = g.target[id].clone()
	}
	return out
}

func TestConsumerRangeAssignor(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t1", 5, "t2", 2)
	for _, id := range []string{"c", "a", "b"} {
		req := cjoin("g", id, "t1", "t2")
		if id == "c" {
			req.SubscribedTopicNames = []string{"t1"}
		}
		req.ServerAssignor = ptr(AssignorRange)
		h.hb(req, tp, 0)
	}
	got := h.targets("g")
	want := map[string]partSet{
		"a": {tp.tp("t1", 0): {}, tp.tp("t1", 1): {}, tp.tp("t2", 0): {}},
		"b": {tp.tp("t1", 2): {}, tp.tp("t1", 3): {}, tp.tp("t2", 1): {}},
		"c": {tp.tp("t1", 4): {}},
	}
	for id, w := range want {
		wantSet(t, "range target "+id, got[id], w)
	}
	if d := h.describe(tp, "g"); d.AssignorName != AssignorRange {
		t.Fatalf("assignor %q", d.AssignorName)
	}
}

func TestConsumerUniformAssignor(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t1", 5, "t2", 3, "t3", 2)
	for _, id := range []string{"a", "b"} {
		h.hb(cjoin("g", id, "t1", "t2"), tp, 0)
	}
	before := h.targets("g")
	h.hb(cjoin("g", "c", "t1", "t2"), tp, 0)
	after := h.targets("g")
	var counts []int
	for _, id := range []string{"a", "b", "c"} {
		counts = append(counts, len(after[id]))
	}
	slices.Sort(counts)
	if !slices.Equal(counts, []int{2, 3, 3}) {
		t.Fatalf("uniform counts %v", counts)
	}
	wantSet(t, "uniform covers", union(after["a"], after["b"], after["c"]), tp.all("t1", "t2"))
	// Sticky: a and b only give partitions up, none move between them.
	for _, id := range []string{"a", "b"} {
		for tp := range after[id] {
			if !before[id].has(tp) {
				t.Fatalf("%s gained %v from a rebalance that only added c", id, tp)
			}
		}
	}
	if d := h.describe(tp, "g"); d.AssignorName != AssignorUniform {
		t.Fatalf("default assignor %q", d.AssignorName)
	}
	// Different subscriptions: each topic goes only to its subscribers.
	h.hb(cjoin("g", "d", "t3"), tp, 0)
	after = h.targets("g")
	wantSet(t, "d alone on t3", after["d"], tp.all("t3"))
	wantSet(t, "others", union(after["a"], after["b"], after["c"]), tp.all("t1", "t2"))
}

func TestConsumerClassicConflicts(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 2)
	// A live classic group cannot be used by the consumer protocol.
	h.stable("cl", 1)
	h.hb(cjoin("cl", "a", "t"), tp, errGroupIDNotFound)
	h.hb(ckeep("cl", "a", 1), tp, errGroupIDNotFound)
	if d := h.describe(tp, "cl"); d.ErrorCode != errGroupIDNotFound {
		t.Fatalf("describe classic: %+v", d)
	}
	// A group known only through its offsets (as after a restart) sends
	// members back to rejoin, and a join makes it a consumer group.
	if c := h.c.EnsureGroup("off"); c != 0 {
		t.Fatal(c)
	}
	h.hb(ckeep("off", "a", 4), tp, errUnknownMemberID)
	h.hb(cleave("off", "a", -1), tp, errGroupIDNotFound)
	h.hb(cjoin("off", "a", "t"), tp, 0)
	if g := h.cgroup("off"); g == nil || h.c.groups["off"] != nil {
		t.Fatal("not converted")
	}
	if c := h.c.EnsureGroup("off"); c != 0 || h.c.groups["off"] != nil {
		t.Fatal("EnsureGroup touched a consumer group")
	}
	// Classic calls on a live consumer group.
	w := h.c.startJoin(joinReq(9, "off", "", nil), "cli", "h")
	if !done(w) || w.resp.ErrorCode != errInconsistentGroupProtocol {
		t.Fatalf("classic join: %d", w.resp.ErrorCode)
	}
	if c := h.c.Heartbeat(hbReq("off", "a", 1)).ErrorCode; c != errUnknownMemberID {
		t.Fatalf("classic heartbeat: %d", c)
	}
	for _, v := range []int16{5, 6} {
		d := h.c.DescribeGroups(&kmsg.DescribeGroupsRequest{Version: v, Groups: []string{"off"}}).Groups[0]
		wantCode := int16(0)
		if v >= 6 {
			wantCode = errGroupIDNotFound
		}
		if d.State != StateDead || d.ErrorCode != wantCode || (v >= 6) != (d.ErrorMessage != nil) {
			t.Fatalf("DescribeGroups v%d: %+v", v, d)
		}
	}
	// Once empty, a classic join converts it back.
	h.hb(cleave("off", "a", -1), tp, 0)
	w = h.c.startJoin(joinReq(9, "off", "", nil), "cli", "h")
	if w.resp.ErrorCode != errMemberIDRequired || h.cgroup("off") != nil || h.c.groups["off"] == nil {
		t.Fatalf("classic join on an empty consumer group: %d", w.resp.ErrorCode)
	}
}

func TestConsumerCommitFetchValidation(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 4)
	h.hb(cjoin("g", "a", "t"), tp, 0)
	h.hb(cjoin("g", "b", "t"), tp, 0)
	r := h.hb(ckeep("g", "a", 1), tp, 0)
	h.hb(cowned("g", "a", 1, assigned(r)), tp, 0) // a: epoch 2 (was 1); b joined at 2
	for _, c := range []struct {
		member string
		epoch  int32
		want   int16
	}{
		{"a", 2, 0},
		// Older than current: it may be a delayed commit of a partition
		// a gave up at epoch 1 and b now owns.
		{"a", 1, errStaleMemberEpoch},
		{"a", 3, errStaleMemberEpoch}, // ahead of the member
		{"a", 0, errStaleMemberEpoch},
		{"b", 1, errStaleMemberEpoch},
		{"zz", 2, errUnknownMemberID},  // unknown member
		{"", -1, errUnknownMemberID},   // admin commit to a group with members
		{"a", -1, errStaleMemberEpoch}, // a member id with no epoch
	} {
		if got := h.c.ValidateCommit("g", c.member, c.epoch, nil); got != c.want {
			t.Fatalf("commit %s@%d: %d, want %d", c.member, c.epoch, got, c.want)
		}
		if got := h.c.ValidateOffsetCommit("g", c.member, c.epoch, nil, 9); got != c.want {
			t.Fatalf("OffsetCommit v9 %s@%d: %d, want %d", c.member, c.epoch, got, c.want)
		}
	}
	// A member must use OffsetCommit v9+ (Kafka: UNSUPPORTED_VERSION); the
	// check is the member's, so an unknown member still gets
	// UNKNOWN_MEMBER_ID, and a TxnOffsetCommit (ValidateCommit) is not
	// checked.
	for _, v := range []int16{0, 2, 8} {
		if got := h.c.ValidateOffsetCommit("g", "a", 2, nil, v); got != errUnsupportedVersion {
			t.Fatalf("OffsetCommit v%d from member a: %d, want UNSUPPORTED_VERSION", v, got)
		}
		if got := h.c.ValidateOffsetCommit("g", "zz", 2, nil, v); got != errUnknownMemberID {
			t.Fatalf("OffsetCommit v%d from unknown member: %d", v, got)
		}
	}
	for _, c := range []struct {
		member *string
		epoch  int32
		want   int16
	}{
		{nil, -1, 0},
		{ptr("a"), 2, 0},
		{ptr("a"), 1, errStaleMemberEpoch},
		{ptr("zz"), 2, errUnknownMemberID},
	} {
		if got := h.c.ValidateFetch("g", c.member, c.epoch); got != c.want {
			t.Fatalf("fetch %v@%d: %d, want %d", c.member, c.epoch, got, c.want)
		}
	}
	// Classic and unknown groups do not check fetches.
	h.stable("cl", 1)
	if got := h.c.ValidateFetch("cl", ptr("zz"), 7); got != 0 {
		t.Fatal(got)
	}
	// With no members left, admin commits are accepted.
	h.hb(cleave("g", "a", -1), tp, 0)
	h.hb(cleave("g", "b", -1), tp, 0)
	if got := h.c.ValidateCommit("g", "", -1, nil); got != 0 {
		t.Fatal(got)
	}
	if got := h.c.ValidateOffsetCommit("g", "", -1, nil, 2); got != 0 {
		t.Fatalf("admin OffsetCommit v2 to an empty consumer group: %d", got)
	}
	if got := h.c.ValidateCommit("g", "a", 2, nil); got != errUnknownMemberID {
		t.Fatal(got)
	}
}

func TestConsumerDescribeListDelete(t *testing.T) {
	var deleted []string
	h := newConsumerHarness(t, WithOnDelete(func(g string) { deleted = append(deleted, g) }))
	tp := newTopics("t", 3)
	req := cjoin("g", "a", "t")
	req.InstanceID, req.RackID, req.ServerAssignor = ptr("i"), ptr("r1"), ptr(AssignorRange)
	h.hb(req, tp, 0)
	h.hb(cjoin("g", "b", "t"), tp, 0)
	h.stable("cl", 1)

	d := h.describe(tp, "g")
	if d.State != StateReconciling || d.Epoch != 2 || d.AssignmentEpoch != 2 || d.AssignorName != AssignorRange || len(d.Members) != 2 {
		t.Fatalf("describe %+v", d)
	}
	a, b := d.Members[0], d.Members[1]
	if a.MemberID != "a" || *a.InstanceID != "i" || *a.RackID != "r1" || a.MemberEpoch != 1 || a.MemberType != 1 ||
		a.ClientID != "cli-a" || a.ClientHost != "/10.0.0.1" ||
		!slices.Equal(a.SubscribedTopics, []string{"t"}) || a.SubscribedTopicRegex != nil {
		t.Fatalf("member a %+v", a)
	}
	if len(a.Assignment.TopicPartitions) != 1 || len(a.Assignment.TopicPartitions[0].Partitions) != 3 ||
		len(a.TargetAssignment.TopicPartitions[0].Partitions) != 2 || a.TargetAssignment.TopicPartitions[0].TopicID != tp.id("t") {
		t.Fatalf("member a assignment %+v target %+v", a.Assignment, a.TargetAssignment)
	}
	if b.MemberEpoch != 2 || len(b.Assignment.TopicPartitions) != 0 || len(b.TargetAssignment.TopicPartitions[0].Partitions) != 1 {
		t.Fatalf("member b %+v", b)
	}
	rd := h.c.ConsumerGroupDescribe(&kmsg.ConsumerGroupDescribeRequest{Groups: []string{"nope", "cl", ""}}, tp)
	for i, want := range []int16{errGroupIDNotFound, errGroupIDNotFound, errInvalidGroupID} {
		if rd.Groups[i].ErrorCode != want {
			t.Fatalf("describe %q: %d", rd.Groups[i].Group, rd.Groups[i].ErrorCode)
		}
	}

	list := func(v int16, states, types []string) []string {
		var out []string
		for _, g := range h.c.ListGroups(&kmsg.ListGroupsRequest{Version: v, StatesFilter: states, TypesFilter: types}).Groups {
			out = append(out, g.Group+"/"+g.ProtocolType+"/"+g.GroupState+"/"+g.GroupType)
		}
		return out
	}
	if got := list(5, nil, nil); !slices.Equal(got, []string{"cl/consumer/Stable/classic", "g/consumer/Reconciling/consumer"}) {
		t.Fatalf("list %v", got)
	}
	if got := list(5, nil, []string{"Consumer"}); len(got) != 1 || !strings.HasPrefix(got[0], "g/") {
		t.Fatalf("list consumer %v", got)
	}
	if got := list(5, []string{"reconciling"}, nil); len(got) != 1 || !strings.HasPrefix(got[0], "g/") {
		t.Fatalf("list reconciling %v", got)
	}
	if got := list(4, []string{"stable"}, []string{"consumer"}); len(got) != 1 || !strings.HasPrefix(got[0], "cl/") {
		t.Fatalf("list v4 ignores types %v", got)
	}

	del := func(ids ...string) []int16 {
		var out []int16
		for _, g := range h.c.DeleteGroups(&kmsg.DeleteGroupsRequest{Version: 2, Groups: ids}).Groups {
			out = append(out, g.ErrorCode)
		}
		return out
	}
	if got := del("g"); got[0] != errNonEmptyGroup {
		t.Fatal(got)
	}
	h.hb(cleave("g", "a", -1), tp, 0)
	h.hb(cleave("g", "b", -1), tp, 0)
	if got := list(5, []string{"Empty"}, nil); !slices.Equal(got, []string{"g/consumer/Empty/consumer"}) {
		t.Fatalf("list empty %v", got)
	}
	if got := del("g"); got[0] != 0 || !slices.Equal(deleted, []string{"g"}) {
		t.Fatalf("delete %v, hook %v", got, deleted)
	}
	if d := h.describe(tp, "g"); d.ErrorCode != errGroupIDNotFound {
		t.Fatalf("describe deleted %+v", d)
	}
	if st, ok := h.c.State("g"); ok || st != StateDead {
		t.Fatal(st, ok)
	}
}

func TestConsumerMaxMembersAndGroups(t *testing.T) {
	h := newConsumerHarness(t, WithMaxMembers(2), WithMaxGroups(2))
	tp := newTopics("t", 2)
	h.hb(cjoin("g", "a", "t"), tp, 0)
	h.hb(cjoin("g", "b", "t"), tp, 0)
	h.hb(cjoin("g", "c", "t"), tp, errGroupMaxSizeReached)
	h.hb(cjoin("g", "a", "t"), tp, 0) // a known member may rejoin
	h.c.EnsureGroup("x")
	h.hb(cjoin("g2", "a", "t"), tp, errGroupMaxSizeReached)
	h.hb(cjoin("x", "a", "t"), tp, 0) // converting x adds no group
}

// simConsumer is one simulated KIP-848 client, behaving like franz-go: it
// applies a received assignment before its next full heartbeat (sending
// keepalives meanwhile), reports what it owns in full heartbeats, and after
// a lost response sends a full heartbeat.
type simConsumer struct {
	name     string
	n        int // incarnation, for fresh member ids
	version  int16
	id       string
	instance *string
	subs     []string
	regex    *string
	assignor string
	joined   bool
	epoch    int32
	owned    partSet // partitions it consumes
	pending  partSet // received, not yet applied
	mustFull bool
}

func (s *simConsumer) newID() {
	s.n++
	s.id = fmt.Sprintf("%s-%d", s.name, s.n)
	if s.version == 0 {
		s.id = ""
	}
}

func TestConsumerRandomized(t *testing.T) {
	seeds, steps := 60, 1500
	if testing.Short() {
		seeds, steps = 10, 500
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runConsumerRandom(t, uint64(seed), steps) })
	}
}

func runConsumerRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x848))
	h := newConsumerHarness(t)
	const group = "g"
	tp := newTopics("t1", 3, "t2", 5)
	assignor := AssignorUniform
	if seed%2 == 1 {
		assignor = AssignorRange
	}
	var clients []*simConsumer
	for i := range 6 {
		c := &simConsumer{name: fmt.Sprintf("c%d", i), version: 1, subs: []string{"t1", "t2", "t3"}, assignor: assignor}
		switch i {
		case 1:
			c.subs = []string{"t1"}
		case 2:
			c.subs, c.regex = nil, ptr("t[0-9]+")
		case 3:
			c.version = 0
		case 4, 5:
			c.instance = ptr(fmt.Sprintf("inst-%d", i))
		}
		c.newID()
		clients = append(clients, c)
	}
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		for _, l := range log[max(0, len(log)-40):] {
			t.Log(l)
		}
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}

	// send runs one request for c and applies what it learns; lost drops
	// the response as if the connection broke.
	send := func(c *simConsumer, req *kmsg.ConsumerGroupHeartbeatRequest, lost bool) {
		resp := h.c.ConsumerGroupHeartbeat(req, tp, "cli-"+req.MemberID, "/10.0.0.1")
		a := assigned(resp)
		log = append(log, fmt.Sprintf("%s epoch %d topics %v lost=%v -> err %d epoch %d assignment %v",
			c.id, req.MemberEpoch, req.Topics != nil, lost, resp.ErrorCode, resp.MemberEpoch, a.sorted()))
		if lost {
			c.mustFull = true
			return
		}
		switch resp.ErrorCode {
		case 0:
		case errUnknownMemberID:
			c.joined, c.owned, c.pending = false, nil, nil
			c.newID()
			return
		case errFencedMemberEpoch:
			c.joined, c.owned, c.pending = false, nil, nil
			return
		case errUnreleasedInstanceID:
			return
		default:
			fail("%s: unexpected error %d", c.id, resp.ErrorCode)
		}
		if req.MemberEpoch < 0 {
			return
		}
		if resp.MemberID != nil {
			c.id = *resp.MemberID
		}
		c.joined, c.epoch, c.mustFull = true, resp.MemberEpoch, false
		if a != nil {
			c.pending = a
		}
	}
	full := func(c *simConsumer) *kmsg.ConsumerGroupHeartbeatRequest {
		if c.pending != nil {
			c.owned, c.pending = c.pending, nil
		}
		r := cowned(group, c.id, c.epoch, c.owned)
		r.Version = c.version
		r.InstanceID = c.instance
		r.RebalanceTimeoutMillis = int32(testRebal / time.Millisecond)
		r.SubscribedTopicNames = append([]string{}, c.subs...)
		r.SubscribedTopicRegex = c.regex
		r.ServerAssignor = &c.assignor
		return r
	}
	join := func(c *simConsumer) *kmsg.ConsumerGroupHeartbeatRequest {
		c.owned, c.pending, c.epoch = nil, nil, 0
		r := full(c)
		r.MemberEpoch = 0
		return r
	}
	keep := func(c *simConsumer) *kmsg.ConsumerGroupHeartbeatRequest {
		r := ckeep(group, c.id, c.epoch)
		r.Version = c.version
		return r
	}

	check := func(step int) {
		g := h.cgroup(group)
		if g == nil {
			return
		}
		owners := map[topicPart]string{}
		for id, m := range g.members {
			if m.epoch > g.epoch {
				fail("step %d: member %s epoch %d > group epoch %d", step, id, m.epoch, g.epoch)
			}
			for _, s := range []partSet{m.assigned, m.revoking} {
				for tp := range s {
					if o, dup := owners[tp]; dup {
						fail("step %d: %v held by %s and %s", step, tp, o, id)
					}
					owners[tp] = id
				}
			}
		}
		if len(owners) != len(g.owners) {
			fail("step %d: owners index %d entries, members hold %d", step, len(g.owners), len(owners))
		}
		for tp, id := range owners {
			if g.owners[tp] != id {
				fail("step %d: owners index says %v is %s's, it is %s's", step, tp, g.owners[tp], id)
			}
		}
		if g.assignEpoch > g.epoch {
			fail("step %d: assignment epoch %d > group epoch %d", step, g.assignEpoch, g.epoch)
		}
		var targeted partSet = partSet{}
		for id, s := range g.target {
			if g.members[id] == nil {
				fail("step %d: target for departed %s", step, id)
			}
			if !disjoint(targeted, s) {
				fail("step %d: targets overlap", step)
			}
			targeted = union(targeted, s)
		}
		// Clients: a client the coordinator dropped stops consuming (its
		// own session logic); the others consume only what the coordinator
		// knows they hold, so no partition is consumed twice.
		consumed := map[topicPart]string{}
		for _, c := range clients {
			m := g.members[c.id]
			if m == nil || !c.joined {
				c.owned = nil
				continue
			}
			for tp := range c.owned {
				if !m.assigned.has(tp) && !m.revoking.has(tp) {
					fail("step %d: %s consumes %v, which the coordinator does not count as its", step, c.id, tp)
				}
				if o, dup := consumed[tp]; dup {
					fail("step %d: %v consumed by %s and %s", step, tp, o, c.id)
				}
				consumed[tp] = c.id
			}
		}
	}

	converge := func(step int) {
		for round := range 60 {
			for _, c := range clients {
				if c.joined {
					send(c, full(c), false)
				} else {
					send(c, join(c), false)
				}
				check(step)
			}
			h.advance(100 * time.Millisecond)
			check(step)
			g := h.cgroup(group)
			if g.state() != StateStable {
				continue
			}
			settled := true
			for _, c := range clients {
				m := g.members[c.id]
				if !c.joined || m == nil || c.pending != nil && !c.pending.equal(c.owned) || !c.owned.equal(m.assigned) {
					settled = false
				}
			}
			if !settled {
				continue
			}
			// Every subscribed partition is assigned exactly once.
			subs, meta := g.subscriptions(&resolver{topics: tp})
			want := partSet{}
			for _, names := range subs {
				for _, n := range names {
					want = union(want, tp.all(n))
				}
			}
			got := partSet{}
			for id, m := range g.members {
				if m.epoch != g.epoch || len(m.revoking) > 0 {
					fail("step %d: stable group with member %s at %d/%d revoking %v", step, id, m.epoch, g.epoch, m.revoking.sorted())
				}
				if !disjoint(got, m.assigned) {
					fail("step %d: overlapping assignments", step)
				}
				got = union(got, m.assigned)
			}
			if !got.equal(want) || !sameMeta(meta, g.subscribed) {
				fail("step %d: stable group assigns %v, subscribed partitions are %v", step, got.sorted(), want.sorted())
			}
			log = append(log, fmt.Sprintf("converged at step %d after %d rounds, epoch %d", step, round, g.epoch))
			return
		}
		fail("step %d: no convergence; state %s", step, h.cgroup(group).state())
	}

	for step := range steps {
		c := clients[rng.IntN(len(clients))]
		switch r := rng.IntN(100); {
		case r < 6:
			h.advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		case r < 8:
			h.advance(testRebal + time.Duration(rng.IntN(int(testSession))))
		case r < 9:
			n := tp.byName["t1"].Partitions
			if n < 12 {
				tp.set("t1", n+1)
			}
			log = append(log, "t1 grows")
		case r < 10:
			if _, ok := tp.byName["t3"]; !ok {
				tp.set("t3", 2)
				log = append(log, "t3 created")
			}
		case !c.joined:
			if rng.IntN(3) > 0 {
				send(c, join(c), false)
			}
		case r < 40:
			if c.mustFull {
				send(c, full(c), false)
			} else {
				send(c, keep(c), false)
			}
		case r < 80:
			send(c, full(c), false)
		case r < 88:
			// Lost response.
			if c.mustFull || rng.IntN(2) == 0 {
				send(c, full(c), true)
			} else {
				send(c, keep(c), true)
			}
		case r < 92:
			// Subscription change.
			if c.regex == nil {
				if len(c.subs) == 1 {
					c.subs = []string{"t1", "t2", "t3"}
				} else {
					c.subs = c.subs[:1]
				}
			}
			send(c, full(c), false)
		default:
			// Leave; a static member leaves temporarily and comes back
			// later as a new incarnation.
			epoch := int32(leaveEpoch)
			if c.instance != nil && rng.IntN(3) > 0 {
				epoch = staticLeaveEpoch
			}
			r := ckeep(group, c.id, epoch)
			r.Version, r.InstanceID = c.version, c.instance
			if c.version == 0 && c.id == "" {
				break
			}
			send(c, r, false)
			c.joined, c.owned, c.pending = false, nil, nil
			c.newID()
		}
		check(step)
		if step%500 == 499 {
			converge(step)
		}
	}
	converge(steps)
}

// TestReset: a replica that starts leading forgets every group it knew
// (review finding: members from an earlier term of its own kept stale
// epochs and assignments). Waiting joins and syncs are answered
// NOT_COORDINATOR.
func TestReset(t *testing.T) {
	h := newConsumerHarness(t)
	tp := newTopics("t", 2)
	h.hb(cjoin("cg", "a", "t"), tp, 0)
	h.converge("cg", tp)
	ids, gen := h.stable("classic", 2)
	// A follower's SyncGroup waiting for the leader's, and a JoinGroup
	// waiting out the initial rebalance delay.
	ws := []*joinWaiter{h.joinNew("classic2", nil), h.joinNew("classic2", nil)}
	h.advance(testDelay)
	ids2, gen2 := h.finishJoins(ws)
	sync := h.c.startSync(syncReq(5, "classic2", ids2[1], gen2, nil))
	join := h.joinNew("classic3", nil)
	if sync.isDone() || join.isDone() {
		t.Fatal("the sync or the join did not wait")
	}
	h.c.Reset()
	for name, w := range map[string]interface {
		isDone() bool
	}{"join": join, "sync": sync} {
		if !w.isDone() {
			t.Fatalf("%s still waiting after Reset", name)
		}
	}
	if join.resp.ErrorCode != errNotCoordinator || sync.resp.ErrorCode != errNotCoordinator {
		t.Fatalf("waiting join answered %d, sync %d, want NOT_COORDINATOR", join.resp.ErrorCode, sync.resp.ErrorCode)
	}
	if h.cgroup("cg") != nil {
		t.Fatal("consumer group kept")
	}
	h.hb(ckeep("cg", "a", 1), tp, errUnknownMemberID)
	if r := h.c.Heartbeat(hbReq("classic", ids[0], gen)); r.ErrorCode == 0 {
		t.Fatal("classic member still known after Reset")
	}
}
