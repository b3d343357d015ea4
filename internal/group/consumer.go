package group

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file is the server side of the KIP-848 consumer group protocol
// (ConsumerGroupHeartbeat v0-1, ConsumerGroupDescribe v0-1). It follows
// Kafka's group coordinator (GroupMetadataManager and CurrentAssignmentBuilder):
//
//   - The group epoch is bumped whenever membership, a member's subscription,
//     the preferred assignor or the metadata (id, partition count) of a
//     subscribed topic changes. The first heartbeat that sees the group epoch
//     ahead of the assignment epoch recomputes the target assignment of every
//     member with the group's server-side assignor ("uniform" or "range").
//   - Each member is reconciled towards its target on its own heartbeats. It
//     keeps its epoch while it still owns partitions the target takes away
//     (state unrevoked: its assignment shrinks to current minus revoked); it
//     acknowledges the revocation by reporting, in TopicPartitions, owned
//     partitions that no longer include them (a heartbeat without
//     TopicPartitions acknowledges nothing). Only then does it move to the
//     target epoch, and it is handed only partitions no other member still
//     holds (state unreleased until they are freed).
//   - Timers run from Tick: a member silent for the session timeout is
//     removed; a member that has not revoked within its rebalance timeout is
//     fenced (removed). Either bumps the group epoch.
//
// Partitions are identified by topic id; the broker supplies its view of the
// topics (Topics) on every call that needs it.

// Consumer-group states, spelled as Kafka reports them (Empty and Stable are
// shared with classic groups).
const (
	StateAssigning   = "Assigning"   // the group epoch is ahead of the target assignment
	StateReconciling = "Reconciling" // some member has not reached the target assignment
)

// consumerGroupType is the ListGroups v5 type (and DescribeGroups protocol
// type) of consumer-protocol groups.
const consumerGroupType = "consumer"

// Assignor names (Kafka's group.consumer.assignors; the first is the default).
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

const (
	leaveEpoch       = -1 // MemberEpoch of a member leaving for good
	staticLeaveEpoch = -2 // MemberEpoch of a static member leaving temporarily

	defaultConsumerSession   = 45 * time.Second
	defaultConsumerHeartbeat = 5 * time.Second
)

// TopicMeta describes one topic for server-side assignment.
type TopicMeta struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// Topics is the coordinator's view of the cluster's topics, supplied by the
// broker per call. It is called with the coordinator's lock held, so it must
// not call back into the Coordinator.
type Topics interface {
	// Topic looks a topic up by name.
	Topic(name string) (TopicMeta, bool)
	// TopicByID looks a topic up by id.
	TopicByID(id [16]byte) (TopicMeta, bool)
	// Names lists every topic a consumer may subscribe to (for regex
	// subscriptions), sorted.
	Names() []string
}

// WithConsumerSessionTimeout sets how long a consumer-protocol member may go
// without heartbeating before it is removed (Kafka's
// group.consumer.session.timeout.ms; default 45s).
func WithConsumerSessionTimeout(d time.Duration) Option {
	return func(co *Coordinator) { co.consumerSession = d }
}

// WithConsumerHeartbeatInterval sets the heartbeat interval handed to
// consumer-protocol members (Kafka's group.consumer.heartbeat.interval.ms;
// default 5s).
func WithConsumerHeartbeatInterval(d time.Duration) Option {
	return func(co *Coordinator) { co.consumerInterval = d }
}

// topicPart is one partition of one topic.
type topicPart struct {
	id [16]byte
	p  int32
}

// partSet is a set of partitions. A nil partSet read from a request means
// "not provided".
type partSet map[topicPart]struct{}

func (s partSet) has(tp topicPart) bool { _, ok := s[tp]; return ok }

func (s partSet) clone() partSet {
	out := make(partSet, len(s))
	for tp := range s {
		out[tp] = struct{}{}
	}
	return out
}

func (s partSet) equal(o partSet) bool {
	if len(s) != len(o) {
		return false
	}
	for tp := range s {
		if !o.has(tp) {
			return false
		}
	}
	return true
}

// sorted lists s by topic id, then partition.
func (s partSet) sorted() []topicPart {
	out := make([]topicPart, 0, len(s))
	for tp := range s {
		out = append(out, tp)
	}
	slices.SortFunc(out, func(a, b topicPart) int {
		if c := bytes.Compare(a.id[:], b.id[:]); c != 0 {
			return c
		}
		return int(a.p) - int(b.p)
	})
	return out
}

// byTopic groups s by topic id (sorted), each with sorted partitions.
func (s partSet) byTopic(each func(id [16]byte, parts []int32)) {
	tps := s.sorted()
	for i := 0; i < len(tps); {
		j := i
		var parts []int32
		for ; j < len(tps) && tps[j].id == tps[i].id; j++ {
			parts = append(parts, tps[j].p)
		}
		each(tps[i].id, parts)
		i = j
	}
}

// memberState is a member's reconciliation state (Kafka's MemberState).
type memberState uint8

const (
	memberStable     memberState = iota // at the target epoch with everything it can get
	memberUnrevoked                     // must revoke partitions before moving on
	memberUnreleased                    // at the target epoch, waiting for partitions others hold
)

func (s memberState) String() string {
	switch s {
	case memberUnrevoked:
		return "unrevoked_partitions"
	case memberUnreleased:
		return "unreleased_partitions"
	}
	return "stable"
}

// cgroup is one consumer-protocol group. All fields are guarded by
// Coordinator.mu.
type cgroup struct {
	id          string
	epoch       int32
	assignEpoch int32
	assignor    string // assignor the current target was computed with
	members     map[string]*cmember
	statics     map[string]string    // instance id -> member id
	target      map[string]partSet   // member id -> target assignment
	owners      map[topicPart]string // partition -> member that assigned it or is revoking it
	subscribed  map[string]TopicMeta // metadata of the subscribed topics at the last epoch bump
	emptySince  time.Time            // when it lost its last member
}

// cmember is one consumer-protocol member.
type cmember struct {
	id               string
	instanceID       *string
	rackID           *string
	clientID         string
	clientHost       string
	epoch            int32
	prevEpoch        int32
	state            memberState
	rebalanceTimeout time.Duration
	assignor         string   // requested server assignor ("" = none)
	topics           []string // subscribed names, sorted and unique
	regex            string   // subscribed regex ("" = none)
	re               *regexp.Regexp
	assigned         partSet // current assignment
	revoking         partSet // partitions pending revocation
	lastSeen         time.Time
	revokeBy         time.Time // unrevoked: fence if not revoked by then
	sent             partSet   // assignment last sent in a response
	sentValid        bool
}

func newConsumerGroup(id string) *cgroup {
	return &cgroup{
		id:         id,
		members:    make(map[string]*cmember),
		statics:    make(map[string]string),
		target:     make(map[string]partSet),
		owners:     make(map[topicPart]string),
		subscribed: map[string]TopicMeta{},
	}
}

// state reports the group's state as Kafka computes it.
func (g *cgroup) state() string {
	switch {
	case len(g.members) == 0:
		return StateEmpty
	case g.epoch > g.assignEpoch:
		return StateAssigning
	}
	for _, m := range g.members {
		if m.state != memberStable || m.epoch != g.assignEpoch {
			return StateReconciling
		}
	}
	return StateStable
}

func (g *cgroup) sortedIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// preferredAssignor is the assignor most members ask for (a tie, or no
// preference at all, goes to the default, uniform).
func (g *cgroup) preferredAssignor() string {
	counts := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			counts[m.assignor]++
		}
	}
	best, n := AssignorUniform, 0
	for _, a := range []string{AssignorUniform, AssignorRange} {
		if counts[a] > n {
			best, n = a, counts[a]
		}
	}
	return best
}

// setHeld replaces m's assigned and revoking sets, keeping owners in step.
func (g *cgroup) setHeld(m *cmember, assigned, revoking partSet) {
	for _, s := range []partSet{m.assigned, m.revoking} {
		for tp := range s {
			if !assigned.has(tp) && !revoking.has(tp) && g.owners[tp] == m.id {
				delete(g.owners, tp)
			}
		}
	}
	for _, s := range []partSet{assigned, revoking} {
		for tp := range s {
			g.owners[tp] = m.id
		}
	}
	m.assigned, m.revoking = assigned, revoking
}

func (g *cgroup) setEpoch(m *cmember, e int32) {
	if m.epoch != e {
		m.prevEpoch, m.epoch = m.epoch, e
	}
}

// remove drops m, freeing its partitions. The caller bumps the group epoch.
func (g *cgroup) remove(m *cmember) {
	g.setHeld(m, partSet{}, partSet{})
	delete(g.members, m.id)
	delete(g.target, m.id)
	if m.instanceID != nil && g.statics[*m.instanceID] == m.id {
		delete(g.statics, *m.instanceID)
	}
}

// ownsAny reports whether owned (nil = not reported, assumed to still hold
// everything) includes any partition of s.
func ownsAny(owned, s partSet) bool {
	if owned == nil {
		return true
	}
	for tp := range owned {
		if s.has(tp) {
			return true
		}
	}
	return false
}

// reconcile moves m towards its target assignment (Kafka's
// CurrentAssignmentBuilder).
func (g *cgroup) reconcile(m *cmember, owned partSet, now time.Time) {
	switch m.state {
	case memberStable:
		if m.epoch == g.assignEpoch {
			return
		}
	case memberUnrevoked:
		if ownsAny(owned, m.revoking) {
			return // still revoking
		}
	}
	target := g.target[m.id]
	keep, revoke, add := partSet{}, partSet{}, partSet{}
	for tp := range m.assigned {
		if target.has(tp) {
			keep[tp] = struct{}{}
		} else {
			revoke[tp] = struct{}{}
		}
	}
	unreleased := false
	for tp := range target {
		if keep.has(tp) {
			continue
		}
		if o, held := g.owners[tp]; held && o != m.id {
			unreleased = true
			continue
		}
		add[tp] = struct{}{}
	}
	if len(revoke) > 0 && ownsAny(owned, revoke) {
		// Revoke first; the epoch stays until the member acknowledges.
		g.setHeld(m, keep, revoke)
		m.state = memberUnrevoked
		m.revokeBy = now.Add(m.rebalanceTimeout)
		return
	}
	for tp := range add {
		keep[tp] = struct{}{}
	}
	g.setHeld(m, keep, partSet{})
	m.state = memberStable
	if unreleased {
		m.state = memberUnreleased
	}
	m.revokeBy = time.Time{}
	g.setEpoch(m, g.assignEpoch)
}

// resolver resolves member subscriptions against the broker's topics once
// per call.
type resolver struct {
	topics Topics
	names  []string
	listed bool
	regex  map[string][]string
}

func (r *resolver) matches(m *cmember) []string {
	if m.re == nil {
		return nil
	}
	if got, ok := r.regex[m.regex]; ok {
		return got
	}
	if !r.listed {
		r.names, r.listed = r.topics.Names(), true
	}
	var out []string
	for _, n := range r.names {
		if m.re.MatchString(n) {
			out = append(out, n)
		}
	}
	if r.regex == nil {
		r.regex = map[string][]string{}
	}
	r.regex[m.regex] = out
	return out
}

// subscriptions returns, per member, the existing topics it subscribes to
// (sorted), and the metadata of all of them.
func (g *cgroup) subscriptions(r *resolver) (map[string][]string, map[string]TopicMeta) {
	meta := map[string]TopicMeta{}
	subs := make(map[string][]string, len(g.members))
	for id, m := range g.members {
		var names []string
		for _, list := range [][]string{m.topics, r.matches(m)} {
			for _, n := range list {
				tm, ok := meta[n]
				if !ok {
					if tm, ok = r.topics.Topic(n); !ok {
						continue
					}
					tm.Name = n
					meta[n] = tm
				}
				if tm.Partitions > 0 {
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		subs[id] = slices.Compact(names)
	}
	return subs, meta
}

func sameMeta(a, b map[string]TopicMeta) bool {
	if len(a) != len(b) {
		return false
	}
	for n, x := range a {
		if y, ok := b[n]; !ok || x.ID != y.ID || x.Partitions != y.Partitions {
			return false
		}
	}
	return true
}

// computeTarget recomputes every member's target assignment.
func (g *cgroup) computeTarget(subs map[string][]string, meta map[string]TopicMeta, assignor string) {
	ids := g.sortedIDs()
	if assignor == AssignorRange {
		g.target = assignRange(ids, subs, meta)
	} else {
		g.target = assignUniform(ids, subs, meta, g.target)
	}
}

// assignRange gives, per topic, contiguous ranges of partitions to the
// members subscribed to it in member id order, the first ones one partition
// more when the count does not divide evenly.
func assignRange(ids []string, subs map[string][]string, meta map[string]TopicMeta) map[string]partSet {
	out := make(map[string]partSet, len(ids))
	byTopic := map[string][]string{}
	for _, id := range ids {
		out[id] = partSet{}
		for _, n := range subs[id] {
			byTopic[n] = append(byTopic[n], id)
		}
	}
	for n, ms := range byTopic {
		tm := meta[n]
		base, extra := tm.Partitions/int32(len(ms)), tm.Partitions%int32(len(ms))
		var next int32
		for i, id := range ms {
			cnt := base
			if int32(i) < extra {
				cnt++
			}
			for p := next; p < next+cnt; p++ {
				out[id][topicPart{tm.ID, p}] = struct{}{}
			}
			next += cnt
		}
	}
	return out
}

// assignUniform spreads every subscribed partition over the members
// subscribed to its topic: members first keep their previous target
// partitions (sticky), unassigned partitions go to the least loaded
// subscriber, then partitions move from the most to the least loaded members
// until no move can narrow a gap of more than one. With identical
// subscriptions that leaves every member within one partition of the others
// and moves only what balance requires.
func assignUniform(ids []string, subs map[string][]string, meta map[string]TopicMeta, prev map[string]partSet) map[string]partSet {
	out := make(map[string]partSet, len(ids))
	eligible := map[[16]byte][]string{}              // topic id -> subscribers, id order
	subscribed := make(map[string]map[[16]byte]bool) // member -> topic ids
	var names []string
	for _, id := range ids {
		out[id] = partSet{}
		subscribed[id] = map[[16]byte]bool{}
		for _, n := range subs[id] {
			tid := meta[n].ID
			if len(eligible[tid]) == 0 {
				names = append(names, n)
			}
			eligible[tid] = append(eligible[tid], id)
			subscribed[id][tid] = true
		}
	}
	slices.Sort(names)
	var all []topicPart
	valid := partSet{}
	for _, n := range names {
		tm := meta[n]
		for p := range tm.Partitions {
			tp := topicPart{tm.ID, p}
			all = append(all, tp)
			valid[tp] = struct{}{}
		}
	}
	taken := partSet{}
	for _, id := range ids {
		for _, tp := range prev[id].sorted() {
			if valid.has(tp) && !taken.has(tp) && subscribed[id][tp.id] {
				taken[tp] = struct{}{}
				out[id][tp] = struct{}{}
			}
		}
	}
	for _, tp := range all {
		if taken.has(tp) {
			continue
		}
		best := ""
		for _, id := range eligible[tp.id] {
			if best == "" || len(out[id]) < len(out[best]) {
				best = id
			}
		}
		out[best][tp] = struct{}{}
	}
	// Each move lowers the sum of squared loads, so this ends.
	order := slices.Clone(ids)
	for {
		slices.SortStableFunc(order, func(a, b string) int { return len(out[a]) - len(out[b]) })
		moved := false
	search:
		for i, r := range order { // receivers, least loaded first
			for j := len(order) - 1; j > i; j-- { // donors, most loaded first
				d := order[j]
				if len(out[d]) <= len(out[r])+1 {
					break
				}
				for _, tp := range out[d].sorted() {
					if subscribed[r][tp.id] {
						delete(out[d], tp)
						out[r][tp] = struct{}{}
						moved = true
						break search
					}
				}
			}
		}
		if !moved {
			return out
		}
	}
}

// newConsumerMemberID returns a random id for v0 joins, shaped like Kafka's
// Uuid.toString (URL-safe base64 of 16 random bytes).
func newConsumerMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func compileTopicRegex(s string) (*regexp.Regexp, error) {
	// Kafka matches the whole topic name (RE2J Matcher.matches).
	return regexp.Compile("^(?:" + s + ")$")
}

// reqRegex is the request's regex subscription (a v1+ field).
func reqRegex(req *kmsg.ConsumerGroupHeartbeatRequest) *string {
	if req.Version < 1 {
		return nil
	}
	return req.SubscribedTopicRegex
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// validateHeartbeat is Kafka's request validation, before any lookup.
func validateHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) (int16, string) {
	if (req.Version >= 1 || req.MemberEpoch > 0 || req.MemberEpoch <= leaveEpoch) && blank(req.MemberID) {
		return errInvalidRequest, "MemberId can't be empty."
	}
	if blank(req.Group) {
		return errInvalidRequest, "GroupId can't be empty."
	}
	if req.InstanceID != nil && blank(*req.InstanceID) {
		return errInvalidRequest, "InstanceId can't be empty."
	}
	if req.RackID != nil && blank(*req.RackID) {
		return errInvalidRequest, "RackId can't be empty."
	}
	switch {
	case req.MemberEpoch == 0:
		if req.RebalanceTimeoutMillis == -1 {
			return errInvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		}
		if req.Topics == nil || len(req.Topics) > 0 {
			return errInvalidRequest, "TopicPartitions must be empty when (re-)joining."
		}
		if req.SubscribedTopicNames == nil && reqRegex(req) == nil {
			return errInvalidRequest, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
		}
	case req.MemberEpoch < staticLeaveEpoch:
		return errInvalidRequest, "MemberEpoch is invalid."
	}
	if a := req.ServerAssignor; a != nil && *a != AssignorUniform && *a != AssignorRange {
		return errUnsupportedAssignor, fmt.Sprintf("ServerAssignor %s is not supported. Supported assignors: %s, %s.", *a, AssignorUniform, AssignorRange)
	}
	if r := reqRegex(req); r != nil && *r != "" {
		if _, err := compileTopicRegex(*r); err != nil {
			return errInvalidRegularExpression, fmt.Sprintf("SubscribedTopicRegex `%s` is not a valid regular expression: %v.", *r, err)
		}
	}
	return errNone, ""
}

// ConsumerGroupHeartbeat handles a ConsumerGroupHeartbeat request (v0-1):
// joins (MemberEpoch 0), heartbeats, and leaves (-1, or -2 for a static
// member that will be back within the session timeout). topics is the
// broker's current view of the topics; it is read, never stored.
//
// Where this deliberately differs from Kafka:
//   - A heartbeat with MemberEpoch > 0 to an unknown group, or to an Empty
//     classic group (known only through offsets, as EnsureGroup registers
//     them after a restart), answers UNKNOWN_MEMBER_ID (Kafka:
//     GROUP_ID_NOT_FOUND), because groups live in memory and a broker
//     restart forgets members: clients then rejoin at once.
//   - A join (MemberEpoch 0, empty TopicPartitions) from a member id the
//     group still has re-admits that member in place: it has given up its
//     partitions, so they are freed and it is reconciled from scratch.
//     Kafka fences it (FENCED_MEMBER_EPOCH, or UNRELEASED_INSTANCE_ID for a
//     static member) until its session expires, although both the Java
//     client and franz-go rejoin with the same id after being fenced.
//   - A static temporary leave (-2) without InstanceID is accepted when the
//     member id names a static member (franz-go sends it so); Kafka answers
//     INVALID_REQUEST.
//
// clientID and clientHost (the request header's client id and the peer's
// address) are shown by ConsumerGroupDescribe.
func (c *Coordinator) ConsumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, topics Topics, clientID, clientHost string) *kmsg.ConsumerGroupHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	code, msg := validateHeartbeat(req)
	if code == errNone {
		c.lock()
		defer c.unlock()
		if req.MemberEpoch < 0 {
			code, msg = c.consumerLeave(req, resp)
		} else {
			code, msg = c.consumerHeartbeat(req, topics, resp)
			if code == errNone {
				m := c.cgroups[req.Group].members[*resp.MemberID]
				m.clientID, m.clientHost = clientID, clientHost
			}
		}
	}
	if code != errNone {
		*resp = kmsg.ConsumerGroupHeartbeatResponse{Version: resp.Version, ErrorCode: code}
		if msg != "" {
			resp.ErrorMessage = &msg
		}
	}
	return resp
}

func (c *Coordinator) consumerLeave(req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) (int16, string) {
	g := c.cgroups[req.Group]
	if g == nil {
		return errGroupIDNotFound, fmt.Sprintf("Consumer group %s not found.", req.Group)
	}
	var m *cmember
	if req.InstanceID != nil {
		sid, ok := g.statics[*req.InstanceID]
		if !ok || g.members[sid] == nil {
			return errUnknownMemberID, fmt.Sprintf("Instance id %s is unknown.", *req.InstanceID)
		}
		if sid != req.MemberID {
			return errFencedInstanceID, fmt.Sprintf("Static member %s with instance id %s was fenced by member %s.", req.MemberID, *req.InstanceID, sid)
		}
		m = g.members[sid]
	} else if m = g.members[req.MemberID]; m == nil {
		return errUnknownMemberID, fmt.Sprintf("Member %s is not a member of group %s.", req.MemberID, g.id)
	}
	id, now := m.id, c.clock.Now()
	resp.MemberID, resp.MemberEpoch = &id, req.MemberEpoch
	if req.MemberEpoch == staticLeaveEpoch {
		if m.instanceID == nil {
			return errInvalidRequest, "InstanceId can't be null."
		}
		// Keep the assignment reserved for the instance until the session
		// times out; partitions being revoked are given up now.
		g.setHeld(m, m.assigned, partSet{})
		m.epoch = staticLeaveEpoch
		m.state = memberStable
		m.revokeBy = time.Time{}
		m.lastSeen = now
		c.log.Info("consumer group static member left temporarily", "group", g.id, "member", id, "instance", *m.instanceID)
		return errNone, ""
	}
	c.log.Info("consumer group member left", "group", g.id, "member", id)
	c.removeConsumerMember(g, m)
	return errNone, ""
}

// removeConsumerMember removes m and bumps the group epoch; the target is
// recomputed by the next heartbeat, as Kafka does.
func (c *Coordinator) removeConsumerMember(g *cgroup, m *cmember) {
	g.remove(m)
	g.epoch++
	if len(g.members) == 0 {
		g.emptySince = c.clock.Now()
		c.notifyEmpty(g.id)
		c.log.Info("consumer group is empty", "group", g.id, "epoch", g.epoch)
	}
}

func (c *Coordinator) consumerHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, topics Topics, resp *kmsg.ConsumerGroupHeartbeatResponse) (int16, string) {
	now := c.clock.Now()
	join := req.MemberEpoch == 0
	g := c.cgroups[req.Group]
	fresh, replaceClassic := g == nil, false
	if fresh {
		switch cl := c.groups[req.Group]; {
		case cl != nil && (cl.state != StateEmpty || len(cl.members) > 0):
			return errGroupIDNotFound, fmt.Sprintf("Group %s is not a consumer group.", req.Group)
		case !join:
			// An unknown group, or one known only through its offsets (as
			// every group is after a restart): the member must rejoin.
			return errUnknownMemberID, fmt.Sprintf("Member %s is not a member of group %s.", req.MemberID, req.Group)
		case cl != nil:
			replaceClassic = true // an Empty classic group (offsets only) becomes a consumer group
		case c.maxGroups > 0 && c.groupCount() >= c.maxGroups:
			return errGroupMaxSizeReached, "The coordinator has reached its maximum number of groups."
		}
		g = newConsumerGroup(req.Group)
	}
	var owned partSet
	if req.Topics != nil {
		owned = partSet{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				owned[topicPart{t.TopicID, p}] = struct{}{}
			}
		}
	}
	memberID := req.MemberID
	if memberID == "" {
		memberID = newConsumerMemberID() // v0 join: the coordinator names the member
	}

	// Resolve who is heartbeating before changing anything.
	var m, replaced *cmember
	if join {
		if req.InstanceID != nil {
			if sid, ok := g.statics[*req.InstanceID]; ok && g.members[sid] != nil {
				old := g.members[sid]
				switch {
				case sid == memberID:
					m = old
				case g.members[memberID] != nil:
					// The member id already names another member: taking
					// the instance over would leave that member's
					// partitions owned by nobody.
					return errInvalidRequest, fmt.Sprintf("Member %s is already a member of group %s with another instance id.", memberID, g.id)
				case old.epoch == staticLeaveEpoch:
					replaced = old
				default:
					return errUnreleasedInstanceID, fmt.Sprintf("Static member %s with instance id %s cannot join the group because the instance id is owned by %s member.", memberID, *req.InstanceID, sid)
				}
			} else {
				m = g.members[memberID]
			}
		} else {
			m = g.members[memberID]
		}
		if m == nil && replaced == nil && c.maxMembers > 0 && len(g.members) >= c.maxMembers {
			return errGroupMaxSizeReached, fmt.Sprintf("The consumer group has reached its maximum capacity of %d members.", c.maxMembers)
		}
	} else {
		if req.InstanceID != nil {
			sid, ok := g.statics[*req.InstanceID]
			if !ok || g.members[sid] == nil {
				return errUnknownMemberID, fmt.Sprintf("Instance id %s is unknown.", *req.InstanceID)
			}
			if sid != memberID {
				return errFencedInstanceID, fmt.Sprintf("Static member %s with instance id %s was fenced by member %s.", memberID, *req.InstanceID, sid)
			}
		}
		if m = g.members[memberID]; m == nil {
			return errUnknownMemberID, fmt.Sprintf("Member %s is not a member of group %s.", memberID, g.id)
		}
		if e := req.MemberEpoch; e > m.epoch {
			return errFencedMemberEpoch, fmt.Sprintf("The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", e, m.epoch)
		} else if e < m.epoch && (e != m.prevEpoch || !isSubset(owned, m.assigned)) {
			// The previous epoch with a subset of the assignment is a member
			// that lost the response bumping its epoch.
			return errFencedMemberEpoch, fmt.Sprintf("The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", e, m.epoch)
		}
	}

	// Apply.
	if replaceClassic {
		delete(c.groups, req.Group)
		c.log.Info("empty classic group converted to a consumer group", "group", req.Group)
	}
	if fresh {
		c.cgroups[req.Group] = g
	}
	bump := false
	switch {
	case replaced != nil:
		// The new incarnation of a static member takes over the reserved
		// assignment and target of the one that left with epoch -2.
		m = &cmember{
			id: memberID, rackID: replaced.rackID, rebalanceTimeout: replaced.rebalanceTimeout,
			assignor: replaced.assignor, topics: replaced.topics, regex: replaced.regex, re: replaced.re,
		}
		held, target := replaced.assigned, g.target[replaced.id]
		g.remove(replaced)
		g.members[memberID] = m
		g.setHeld(m, held, partSet{})
		if target != nil {
			g.target[memberID] = target
		}
		c.log.Info("consumer group static member replaced", "group", g.id, "instance", *req.InstanceID, "old", replaced.id, "new", memberID)
	case m == nil:
		m = &cmember{id: memberID, assigned: partSet{}, revoking: partSet{}}
		g.members[memberID] = m
		bump = true
		c.log.Info("consumer group member joined", "group", g.id, "member", memberID)
	case join:
		// A known member rejoining has given up its partitions.
		g.setHeld(m, partSet{}, partSet{})
		m.epoch, m.prevEpoch = 0, 0
		m.state, m.revokeBy, m.sentValid = memberStable, time.Time{}, false
	}
	if req.InstanceID != nil && (m.instanceID == nil || *m.instanceID != *req.InstanceID) {
		if m.instanceID != nil && g.statics[*m.instanceID] == m.id {
			delete(g.statics, *m.instanceID)
		}
		inst := *req.InstanceID
		m.instanceID = &inst
		g.statics[inst] = m.id
	}
	if req.RackID != nil {
		rack := *req.RackID
		m.rackID = &rack
	}
	if req.RebalanceTimeoutMillis != -1 {
		m.rebalanceTimeout = millis(max(req.RebalanceTimeoutMillis, 0))
	}
	if req.ServerAssignor != nil {
		m.assignor = *req.ServerAssignor
	}
	if names := req.SubscribedTopicNames; names != nil {
		sorted := slices.Compact(slices.Sorted(slices.Values(names)))
		bump = bump || !slices.Equal(sorted, m.topics)
		m.topics = sorted
	}
	if r := reqRegex(req); r != nil && *r != m.regex {
		m.regex, m.re = *r, nil
		if *r != "" {
			m.re, _ = compileTopicRegex(*r) // validated
		}
		bump = true
	}

	// Group epoch and target assignment.
	subs, meta := g.subscriptions(&resolver{topics: topics})
	assignor := g.preferredAssignor()
	if g.epoch == 0 || bump || assignor != g.assignor || !sameMeta(meta, g.subscribed) {
		g.epoch++
		g.subscribed = meta
		c.log.Debug("consumer group epoch bumped", "group", g.id, "epoch", g.epoch)
	}
	if g.epoch > g.assignEpoch {
		g.computeTarget(subs, meta, assignor)
		g.assignEpoch, g.assignor = g.epoch, assignor
	}

	g.reconcile(m, owned, now)
	m.lastSeen = now

	id := m.id
	resp.MemberID = &id
	resp.MemberEpoch = m.epoch
	resp.HeartbeatIntervalMillis = int32(c.consumerInterval / time.Millisecond)
	full := join || (req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || reqRegex(req) != nil) && req.Topics != nil)
	if full || !m.sentValid || !m.sent.equal(m.assigned) {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		m.assigned.byTopic(func(tid [16]byte, parts []int32) {
			t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			t.TopicID, t.Partitions = tid, parts
			a.Topics = append(a.Topics, t)
		})
		resp.Assignment = &a
		m.sent, m.sentValid = m.assigned.clone(), true
	}
	return errNone, ""
}

// isSubset reports whether owned (nil = not reported) is within assigned.
func isSubset(owned, assigned partSet) bool {
	if owned == nil {
		return false
	}
	for tp := range owned {
		if !assigned.has(tp) {
			return false
		}
	}
	return true
}

// tickConsumer expires silent members and fences members that did not
// revoke within their rebalance timeout.
func (c *Coordinator) tickConsumer(g *cgroup, now time.Time) {
	for _, id := range g.sortedIDs() {
		m := g.members[id]
		switch {
		case !now.Before(m.lastSeen.Add(c.consumerSession)):
			c.log.Info("consumer group member session expired", "group", g.id, "member", id)
		case m.state == memberUnrevoked && !m.revokeBy.IsZero() && !now.Before(m.revokeBy):
			c.log.Info("consumer group member fenced: partitions not revoked within the rebalance timeout", "group", g.id, "member", id)
		default:
			continue
		}
		c.removeConsumerMember(g, m)
	}
}

// ConsumerGroupDescribe handles a ConsumerGroupDescribe request (v0-1).
// Unknown groups and classic groups answer GROUP_ID_NOT_FOUND. Topic names
// come from topics; partitions of topics it no longer knows are left out,
// as Kafka does.
func (c *Coordinator) ConsumerGroupDescribe(req *kmsg.ConsumerGroupDescribeRequest, topics Topics) *kmsg.ConsumerGroupDescribeResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	c.lock()
	defer c.unlock()
	assignment := func(s partSet) kmsg.Assignment {
		a := kmsg.NewAssignment()
		a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
		s.byTopic(func(tid [16]byte, parts []int32) {
			name := ""
			if topics != nil {
				tm, ok := topics.TopicByID(tid)
				if !ok {
					return
				}
				name = tm.Name
			}
			a.TopicPartitions = append(a.TopicPartitions, kmsg.AssignmentTopicPartition{TopicID: tid, Topic: name, Partitions: parts})
		})
		return a
	}
	for _, id := range req.Groups {
		d := kmsg.NewConsumerGroupDescribeResponseGroup()
		d.Group = id
		g := c.cgroups[id]
		switch {
		case id == "":
			d.ErrorCode = errInvalidGroupID
		case g == nil && c.groups[id] != nil:
			d.ErrorCode = errGroupIDNotFound
			msg := fmt.Sprintf("Group %s is not a consumer group.", id)
			d.ErrorMessage = &msg
		case g == nil:
			d.ErrorCode = errGroupIDNotFound
			msg := fmt.Sprintf("Group %s not found.", id)
			d.ErrorMessage = &msg
		default:
			d.State = g.state()
			d.Epoch, d.AssignmentEpoch = g.epoch, g.assignEpoch
			// The assignor the current target was computed with; before
			// any, the one the members ask for.
			d.AssignorName = g.assignor
			if d.AssignorName == "" {
				d.AssignorName = g.preferredAssignor()
			}
			d.Members = []kmsg.ConsumerGroupDescribeResponseGroupMember{}
			for _, mid := range g.sortedIDs() {
				m := g.members[mid]
				dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				dm.MemberID, dm.InstanceID, dm.RackID = m.id, m.instanceID, m.rackID
				dm.MemberEpoch = m.epoch
				dm.ClientID, dm.ClientHost = m.clientID, m.clientHost
				dm.SubscribedTopics = append([]string{}, m.topics...)
				if m.regex != "" {
					r := m.regex
					dm.SubscribedTopicRegex = &r
				}
				dm.Assignment = assignment(m.assigned)
				dm.TargetAssignment = assignment(g.target[m.id])
				dm.MemberType = 1 // consumer protocol
				d.Members = append(d.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

// validateConsumerCommit decides an OffsetCommit (or TxnOffsetCommit) for
// a consumer-protocol group:
//   - generation -1 with no member (an admin commit) is accepted only while
//     the group has no members, as in Kafka;
//   - an unknown member gets UNKNOWN_MEMBER_ID;
//   - a member's OffsetCommit below version 9 gets UNSUPPORTED_VERSION
//     (version is -1 for a TxnOffsetCommit, which is not checked);
//   - any epoch but the member's current one gets STALE_MEMBER_EPOCH, as in
//     Kafka 4.0-4.2. An older epoch is not accepted: without Kafka 4.3's
//     per-partition assignment epochs (KIP-1251), a delayed commit from
//     before a reassignment could overwrite the new owner's offsets. The
//     client sees the error, and the records are read again (at least
//     once).
//
// Commits do not extend a consumer-protocol member's session.
func (c *Coordinator) validateConsumerCommit(g *cgroup, memberID string, epoch int32, version int16) int16 {
	if epoch < 0 && len(g.members) == 0 {
		return errNone
	}
	m := g.members[memberID]
	if m == nil {
		return errUnknownMemberID
	}
	if version >= 0 && version < 9 {
		return errUnsupportedVersion
	}
	if epoch != m.epoch {
		return errStaleMemberEpoch
	}
	return errNone
}

// ValidateFetch decides an OffsetFetch v9+ that names a member (memberID
// non-nil) for group: 0 when allowed. As in Kafka, only consumer-protocol
// groups check members: an unknown member answers UNKNOWN_MEMBER_ID and an
// epoch other than the member's STALE_MEMBER_EPOCH. A nil memberID (admin
// tools, classic consumers) is not checked.
func (c *Coordinator) ValidateFetch(group string, memberID *string, memberEpoch int32) int16 {
	if memberID == nil {
		return errNone
	}
	c.lock()
	defer c.unlock()
	g := c.cgroups[group]
	if g == nil {
		return errNone
	}
	m := g.members[*memberID]
	if m == nil {
		return errUnknownMemberID
	}
	if memberEpoch != m.epoch {
		return errStaleMemberEpoch
	}
	return errNone
}
