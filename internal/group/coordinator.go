package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group states, spelled exactly as Kafka reports them.
const (
	StateEmpty               = "Empty"               // no members (offsets may exist)
	StatePreparingRebalance  = "PreparingRebalance"  // waiting for members to (re)join
	StateCompletingRebalance = "CompletingRebalance" // waiting for the leader's SyncGroup
	StateStable              = "Stable"              // assignments handed out
	StateDead                = "Dead"                // unknown or deleted group
)

// groupType is the ListGroups v5 type of every group this package manages.
const groupType = "classic"

// Clock supplies the current time. Timers are not needed: deadlines are
// checked by Tick.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Option configures a Coordinator.
type Option func(*Coordinator)

// WithClock sets the clock requests read "now" from (default: time.Now,
// whose monotonic reading measures the timeouts). The broker gives its
// broker time: when a group became empty is stored, and offsets retention
// compares it with stored commit times.
func WithClock(c Clock) Option { return func(co *Coordinator) { co.clock = c } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(co *Coordinator) { co.log = l } }

// WithInitialRebalanceDelay sets how long a rebalance of an Empty group
// waits for more members (Kafka's group.initial.rebalance.delay.ms). Each new
// member joining during the delay extends it by d again, up to the rebalance
// timeout. Default 300ms; 0 disables the delay.
func WithInitialRebalanceDelay(d time.Duration) Option {
	return func(co *Coordinator) { co.initialDelay = d }
}

// WithMaxGroups caps the number of groups (0 = unlimited, the default).
// Creating a group beyond the cap fails with GROUP_MAX_SIZE_REACHED.
func WithMaxGroups(n int) Option { return func(co *Coordinator) { co.maxGroups = n } }

// WithMaxMembers caps members per group, counting member ids handed out but
// not yet used (Kafka's group.max.size; 0 = unlimited, the default). Joins
// beyond it fail with GROUP_MAX_SIZE_REACHED.
func WithMaxMembers(n int) Option { return func(co *Coordinator) { co.maxMembers = n } }

// WithSessionTimeoutBounds sets the accepted session timeout range (Kafka's
// group.min/max.session.timeout.ms, default 6s and 30m). Joins outside it
// fail with INVALID_SESSION_TIMEOUT.
func WithSessionTimeoutBounds(min, max time.Duration) Option {
	return func(co *Coordinator) { co.minSession, co.maxSession = min, max }
}

// WithOnEmpty registers f, called (outside the coordinator's lock, on the
// goroutine of the call or Tick that emptied the group) with the group id
// whenever a group loses its last member and becomes Empty. f may call the
// Coordinator.
func WithOnEmpty(f func(group string)) Option { return func(co *Coordinator) { co.onEmpty = f } }

// WithOnDelete registers f, called (outside the coordinator's lock) with the
// group id after Delete removed the group; the broker drops its offsets.
func WithOnDelete(f func(group string)) Option { return func(co *Coordinator) { co.onDelete = f } }

// Coordinator tracks classic and consumer-protocol (KIP-848) groups, which
// share one namespace of group ids. It is safe for concurrent use.
type Coordinator struct {
	clock        Clock
	log          *slog.Logger
	initialDelay time.Duration
	maxGroups    int
	maxMembers   int
	minSession   time.Duration
	maxSession   time.Duration
	onEmpty      func(string)
	onDelete     func(string)
	newID        func(clientID string) string

	consumerSession  time.Duration // consumer-protocol session timeout
	consumerInterval time.Duration // consumer-protocol heartbeat interval

	mu      sync.Mutex
	groups  map[string]*group  // classic groups
	cgroups map[string]*cgroup // consumer-protocol (KIP-848) groups; ids never in groups too
	pending []func()           // hooks to run once mu is released
}

// New returns a Coordinator configured by opts.
func New(opts ...Option) *Coordinator {
	c := &Coordinator{
		clock:        realClock{},
		log:          slog.Default(),
		initialDelay: 300 * time.Millisecond,
		minSession:   6 * time.Second,
		maxSession:   30 * time.Minute,
		groups:       make(map[string]*group),
		newID:        newMemberID,

		consumerSession:  defaultConsumerSession,
		consumerInterval: defaultConsumerHeartbeat,
		cgroups:          make(map[string]*cgroup),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// newMemberID returns clientID + "-" + a random UUID, as Kafka does.
func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return clientID + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (c *Coordinator) lock() { c.mu.Lock() }

// unlock releases mu and then runs the hooks queued while it was held.
func (c *Coordinator) unlock() {
	hooks := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

func (c *Coordinator) notifyEmpty(id string) {
	if c.onEmpty != nil {
		f := c.onEmpty
		c.pending = append(c.pending, func() { f(id) })
	}
}

// Reset forgets every group of both protocols, as a coordinator that
// starts leading must: membership is not replicated, and members a replica
// remembers from an earlier term of its own would be stale (their epochs
// and assignments may collide with those another leader gave out since).
// JoinGroup and SyncGroup calls still waiting are answered NOT_COORDINATOR.
// No hook runs: committed offsets are not the coordinator's.
func (c *Coordinator) Reset() { c.Forget(func(string) bool { return true }) }

// Forget is Reset for the groups picks chooses only: those whose
// coordinator moved to another replication group.
func (c *Coordinator) Forget(picks func(group string) bool) {
	c.lock()
	defer c.unlock()
	for id, g := range c.groups {
		if !picks(id) {
			continue
		}
		for _, m := range g.members {
			if w := m.join; w != nil {
				w.resp.ErrorCode = errNotCoordinator
				m.join = nil
				w.finish()
			}
			if w := m.sync; w != nil {
				w.resp.ErrorCode = errNotCoordinator
				m.sync = nil
				w.finish()
			}
		}
		delete(c.groups, id)
	}
	for id := range c.cgroups {
		if picks(id) {
			delete(c.cgroups, id)
		}
	}
}

// groupCount counts groups of both protocols (for WithMaxGroups).
func (c *Coordinator) groupCount() int { return len(c.groups) + len(c.cgroups) }

// group is one classic group. All fields are guarded by Coordinator.mu.
type group struct {
	id           string
	state        string
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []string             // member ids in join order (leader choice)
	statics      map[string]string    // instance id -> member id
	pendingIDs   map[string]time.Time // KIP-394 ids awaiting their rejoin, by expiry
	emptySince   time.Time            // when it was created or last became Empty

	rebalanceDeadline time.Time // PreparingRebalance: give up on missing members
	initialUntil      time.Time // PreparingRebalance from Empty: initial delay end
	initialCap        time.Time // latest initialUntil may be extended to
	syncDeadline      time.Time // CompletingRebalance: give up on the leader's sync
}

// member is one group member.
type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []kmsg.JoinGroupRequestProtocol
	assignment       []byte
	lastSeen         time.Time
	synced           bool // has sent SyncGroup in the current generation
	fresh            bool // joined but not yet part of a completed generation

	join *joinWaiter // set while a JoinGroup waits (= joined this round)
	sync *syncWaiter // set while a SyncGroup waits for the leader
}

// joinWaiter is one JoinGroup call; done closes once resp is final.
type joinWaiter struct {
	resp *kmsg.JoinGroupResponse
	done chan struct{}
	g    *group
	m    *member
}

func (w *joinWaiter) finish() { close(w.done) }

// syncWaiter is one SyncGroup call; done closes once resp is final.
type syncWaiter struct {
	resp *kmsg.SyncGroupResponse
	done chan struct{}
	m    *member
}

func (w *syncWaiter) finish() { close(w.done) }

func (g *group) removeFromOrder(id string) {
	for i, o := range g.order {
		if o == id {
			g.order = append(g.order[:i], g.order[i+1:]...)
			return
		}
	}
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// State reports a group's state, and whether the coordinator knows it.
// Unknown groups report StateDead; consumer-protocol groups report Empty,
// Assigning, Reconciling or Stable.
func (c *Coordinator) State(group string) (state string, exists bool) {
	c.lock()
	defer c.unlock()
	if cg := c.cgroups[group]; cg != nil {
		return cg.state(), true
	}
	g := c.groups[group]
	if g == nil {
		return StateDead, false
	}
	return g.state, true
}

// EmptyGroups returns the groups of either protocol that have no member,
// each with the time it became empty: when it was created (EnsureGroup
// included, so after Reset no group is older than the reset) or lost its
// last member. A classic group with member ids awaiting their second
// JoinGroup is not listed. The broker expires the committed offsets of groups empty
// for longer than offsets.retention.minutes, and deletes empty groups that
// have none.
func (c *Coordinator) EmptyGroups() map[string]time.Time {
	c.lock()
	defer c.unlock()
	out := make(map[string]time.Time)
	for id, g := range c.groups {
		// Member ids handed out and awaiting their rejoin (KIP-394)
		// make a group about to be joined, not an abandoned one.
		if g.state == StateEmpty && len(g.members) == 0 && len(g.pendingIDs) == 0 {
			out[id] = g.emptySince
		}
	}
	for id, cg := range c.cgroups {
		if len(cg.members) == 0 {
			out[id] = cg.emptySince
		}
	}
	return out
}

// EnsureGroup registers group as Empty if it is unknown, for groups that
// exist only through committed offsets (for instance loaded from
// __consumer_offsets at startup), so ListGroups, DescribeGroups and
// DeleteGroups see them. It returns INVALID_GROUP_ID for an empty id,
// GROUP_MAX_SIZE_REACHED when WithMaxGroups is exceeded, else 0.
func (c *Coordinator) EnsureGroup(group string) int16 {
	return c.EnsureGroupSince(group, time.Time{})
}

// EnsureGroupSince is EnsureGroup for a group known to have been empty
// since a time before now (the broker's record of it): a group it creates
// counts as empty since then instead of since now. A zero since is now.
func (c *Coordinator) EnsureGroupSince(group string, since time.Time) int16 {
	if group == "" {
		return errInvalidGroupID
	}
	c.lock()
	defer c.unlock()
	if c.cgroups[group] != nil || c.groups[group] != nil {
		return errNone
	}
	g, code := c.getOrCreate(group)
	if g != nil && !since.IsZero() && since.Before(g.emptySince) {
		g.emptySince = since
	}
	return code
}

// getOrCreate returns the classic group id, creating it Empty if unknown. A
// consumer-protocol group with that id answers INCONSISTENT_GROUP_PROTOCOL
// while it has members; an empty one is replaced by the classic group, as
// Kafka converts empty groups between the protocols.
func (c *Coordinator) getOrCreate(id string) (*group, int16) {
	if g := c.groups[id]; g != nil {
		return g, errNone
	}
	if cg := c.cgroups[id]; cg != nil {
		if len(cg.members) > 0 {
			return nil, errInconsistentGroupProtocol
		}
		delete(c.cgroups, id)
		c.log.Info("empty consumer group converted to a classic group", "group", id)
	}
	if c.maxGroups > 0 && c.groupCount() >= c.maxGroups {
		return nil, errGroupMaxSizeReached
	}
	g := &group{
		id:         id,
		state:      StateEmpty,
		members:    make(map[string]*member),
		statics:    make(map[string]string),
		pendingIDs: make(map[string]time.Time),
		emptySince: c.clock.Now(),
	}
	c.groups[id] = g
	return g, errNone
}

// Tick expires sessions, pending member ids and rebalance deadlines as of
// now. The owner calls it periodically (about every 100ms); a coarser period
// only delays expiry.
func (c *Coordinator) Tick(now time.Time) {
	c.lock()
	defer c.unlock()
	for _, g := range c.groups {
		c.tickGroup(g, now)
	}
	for _, g := range c.cgroups {
		c.tickConsumer(g, now)
	}
}

// Run calls Tick with the clock's time every interval until ctx ends.
func (c *Coordinator) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Tick(c.clock.Now())
		}
	}
}

func (c *Coordinator) tickGroup(g *group, now time.Time) {
	for id, exp := range g.pendingIDs {
		if !now.Before(exp) {
			delete(g.pendingIDs, id)
		}
	}
	// Session expiry. Members waiting in JoinGroup or SyncGroup are alive:
	// the coordinator owes them an answer.
	var expired bool
	for _, id := range append([]string(nil), g.order...) {
		m := g.members[id]
		if m.join != nil || m.sync != nil {
			continue
		}
		if !now.Before(m.lastSeen.Add(m.sessionTimeout)) {
			c.log.Info("group member session expired", "group", g.id, "member", id)
			c.removeMember(g, m, errUnknownMemberID)
			expired = true
		}
	}
	if expired {
		c.membersChanged(g, now)
	}
	switch g.state {
	case StatePreparingRebalance:
		if !g.initialUntil.IsZero() && !now.Before(g.initialUntil) {
			g.initialUntil = time.Time{}
		}
		if !now.Before(g.rebalanceDeadline) {
			c.completeRebalance(g, now)
		} else {
			c.maybeComplete(g, now)
		}
	case StateCompletingRebalance:
		if !now.Before(g.syncDeadline) {
			// The leader never sent its assignment: drop whoever has not
			// synced and start over.
			for _, id := range append([]string(nil), g.order...) {
				if m := g.members[id]; !m.synced {
					c.removeMember(g, m, errUnknownMemberID)
				}
			}
			c.prepareRebalance(g, now, "sync timeout")
			c.maybeComplete(g, now)
		}
	}
}

// removeMember drops m from g, answering any waiting call with code. It does
// not start a rebalance; callers follow up with membersChanged.
func (c *Coordinator) removeMember(g *group, m *member, code int16) {
	if m.join != nil {
		m.join.resp.ErrorCode = code
		m.join.resp.MemberID = m.id
		m.join.finish()
		m.join = nil
	}
	if m.sync != nil {
		m.sync.resp.ErrorCode = code
		m.sync.finish()
		m.sync = nil
	}
	delete(g.members, m.id)
	g.removeFromOrder(m.id)
	if m.instanceID != nil && g.statics[*m.instanceID] == m.id {
		delete(g.statics, *m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
	}
}

// membersChanged reacts to members having left or expired.
func (c *Coordinator) membersChanged(g *group, now time.Time) {
	switch g.state {
	case StateStable, StateCompletingRebalance:
		c.prepareRebalance(g, now, "member left")
		c.maybeComplete(g, now)
	case StatePreparingRebalance:
		c.maybeComplete(g, now)
	}
}

// prepareRebalance moves g to PreparingRebalance. Members must rejoin by the
// rebalance deadline.
func (c *Coordinator) prepareRebalance(g *group, now time.Time, reason string) {
	if g.state == StateCompletingRebalance {
		for _, m := range g.members {
			if m.sync != nil {
				m.sync.resp.ErrorCode = errRebalanceInProgress
				m.sync.finish()
				m.sync = nil
			}
		}
	}
	fromEmpty := g.state == StateEmpty
	g.state = StatePreparingRebalance
	g.rebalanceDeadline = now.Add(g.maxRebalanceTimeout())
	g.initialUntil = time.Time{}
	if fromEmpty && c.initialDelay > 0 {
		g.initialCap = g.rebalanceDeadline
		g.initialUntil = minTime(now.Add(c.initialDelay), g.initialCap)
	}
	c.log.Debug("group rebalancing", "group", g.id, "reason", reason, "generation", g.generation)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maybeComplete completes a PreparingRebalance once every member rejoined
// (and any initial delay elapsed), or at once if no members remain.
func (c *Coordinator) maybeComplete(g *group, now time.Time) {
	if g.state != StatePreparingRebalance {
		return
	}
	if len(g.members) > 0 {
		if !g.initialUntil.IsZero() {
			return
		}
		for _, m := range g.members {
			if m.join == nil {
				return
			}
		}
	}
	c.completeRebalance(g, now)
}

// completeRebalance ends PreparingRebalance: members that did not rejoin are
// removed and everyone waiting gets the new generation.
func (c *Coordinator) completeRebalance(g *group, now time.Time) {
	for _, id := range append([]string(nil), g.order...) {
		if m := g.members[id]; m.join == nil {
			c.log.Info("group member did not rejoin in time", "group", g.id, "member", id)
			c.removeMember(g, m, errUnknownMemberID)
		}
	}
	g.initialUntil = time.Time{}
	if len(g.members) == 0 {
		c.becomeEmpty(g)
		return
	}
	if _, ok := g.members[g.leader]; !ok {
		g.leader = g.order[0]
	}
	leader := g.members[g.leader]
	protocol, ok := "", false
	for _, p := range leader.protocols {
		if c.allSupport(g, p.Name) {
			protocol, ok = p.Name, true
			break
		}
	}
	if !ok {
		// Join validation makes this unreachable; fail everyone safely.
		for _, id := range append([]string(nil), g.order...) {
			c.removeMember(g, g.members[id], errInconsistentGroupProtocol)
		}
		c.becomeEmpty(g)
		return
	}
	g.generation++
	g.protocol = protocol
	g.protocolType = leader.protocolType
	g.state = StateCompletingRebalance
	g.syncDeadline = now.Add(g.maxRebalanceTimeout())
	for _, id := range g.order {
		m := g.members[id]
		m.assignment = nil
		m.synced = false
		m.fresh = false
		m.lastSeen = now
		c.fillJoin(g, m, m.join.resp, m.id == g.leader)
		m.join.finish()
		m.join = nil
	}
	c.log.Info("group rebalanced", "group", g.id, "generation", g.generation,
		"members", len(g.members), "leader", g.leader, "protocol", protocol)
}

func (c *Coordinator) becomeEmpty(g *group) {
	g.generation++
	g.state = StateEmpty
	g.protocol = ""
	g.leader = ""
	g.emptySince = c.clock.Now()
	c.notifyEmpty(g.id)
	c.log.Info("group is empty", "group", g.id, "generation", g.generation)
}

func (c *Coordinator) allSupport(g *group, name string) bool {
	for _, m := range g.members {
		if !supports(m.protocols, name) {
			return false
		}
	}
	return true
}

func supports(ps []kmsg.JoinGroupRequestProtocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// fillJoin writes the current generation into resp for m; the leader also
// gets every member's metadata for the chosen protocol.
func (c *Coordinator) fillJoin(g *group, m *member, resp *kmsg.JoinGroupResponse, withMembers bool) {
	resp.ErrorCode = errNone
	resp.Generation = g.generation
	pt, pn := g.protocolType, g.protocol
	resp.ProtocolType = &pt
	resp.Protocol = &pn
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	resp.Members = nil
	if !withMembers {
		return
	}
	for _, id := range g.order {
		o := g.members[id]
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = o.id
		jm.InstanceID = o.instanceID
		jm.ProtocolMetadata = []byte{}
		for _, p := range o.protocols {
			if p.Name == g.protocol {
				jm.ProtocolMetadata = p.Metadata
				if jm.ProtocolMetadata == nil {
					jm.ProtocolMetadata = []byte{}
				}
				break
			}
		}
		resp.Members = append(resp.Members, jm)
	}
}
