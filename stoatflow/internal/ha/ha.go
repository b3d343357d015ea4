// Package ha decides, for one pod of an active-standby application, who is
// active: a pure state machine over the records of the coordination topic
// and the local clock, with no I/O. The runtime feeds it every record of
// the topic's single partition in order (Observe), the passing of time
// (Tick) and this pod's own replication lag (SetLag); it answers with
// actions to carry out (publish a heartbeat or a claim, promote, demote).
//
// Safety rests on the partition's total order: a claim of token epoch E+1
// names the epoch it replaces (E), and the claim of E+1 that comes first in
// the log wins. Every pod reads the same log, so every pod agrees on the
// winner; a loser sees it and stands down. Claims are keyed
// claim/<epoch>/<pod>, so compaction never removes the first claim of an
// epoch in favour of a later one. Under exactly-once the producer epoch is
// the fence behind it: a pod that wins by mistake still cannot commit
// beside another.
//
// Failure detection uses the local monotonic clock (how long ago the
// active's last heartbeat arrived here) and the log's order (how many of
// this pod's own heartbeats follow the active's last one): the active is
// gone when both say so, so a pod that was stalled itself does not take
// its own silence for the active's. No wall clock of another pod is
// compared with ours.
package ha

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Roles and states as /ha/status reports them.
const (
	RoleActive  = "ACTIVE"
	RoleStandby = "STANDBY"

	StateActive       = "ACTIVE"
	StatePromoting    = "PROMOTING"
	StateHandingOff   = "HANDING_OFF"
	StateCatchingUp   = "CATCHING_UP"
	StateReadyStandby = "READY_STANDBY"
	StateStopped      = "STOPPED"
)

// Commands an operator publishes through the HTTP endpoints.
const (
	CmdSwitch  = "SWITCH"
	CmdPromote = "PROMOTE"
	CmdDemote  = "DEMOTE"
)

// Heartbeat is a pod's periodic record, keyed hb/<pod>.
type Heartbeat struct {
	Pod        string `json:"podId"`
	Role       string `json:"role"`
	State      string `json:"state"`
	LagRecords int64  `json:"replicationLagRecords"`
	LagMs      int64  `json:"replicationLagMs"`
	Priority   int    `json:"failoverPriority"`
	Generation int64  `json:"generation"`
	TokenEpoch int64  `json:"tokenEpoch"`
	Stopping   bool   `json:"stopping,omitempty"`
	// Incarnation is the run of the pod that sent it, so that a pod
	// counts only its own current heartbeats (see peer.ownSince).
	Incarnation string `json:"incarnation,omitempty"`
}

// Claim asks for token epoch Epoch, replacing Prev; keyed
// claim/<epoch>/<pod>.
type Claim struct {
	Pod string `json:"podId"`
	// Incarnation tells this run of the pod from an earlier one: a pod
	// restarted reads its own old claims back and must not act on them.
	Incarnation string `json:"incarnation"`
	Epoch       int64  `json:"epoch"`
	Prev        int64  `json:"prevEpoch"`
	Lag         int64  `json:"lag"`
	Reason      string `json:"reason"`
}

// Release gives up token epoch Epoch (a graceful handoff), optionally to
// one successor; keyed release/<epoch>.
type Release struct {
	Pod   string `json:"podId"`
	Epoch int64  `json:"epoch"`
	To    string `json:"to,omitempty"`
	Force bool   `json:"force,omitempty"`
}

// Command is an operator's request; keyed cmd/<id>.
type Command struct {
	Command string `json:"command"`
	Target  string `json:"target,omitempty"`
	Force   bool   `json:"force"`
}

// Record is one decoded record of the coordination topic.
type Record struct {
	Offset    int64
	Heartbeat *Heartbeat
	Claim     *Claim
	Release   *Release
	Command   *Command
}

// Decode reads a coordination record; unknown keys are skipped (nil,
// nil), so a newer version's records do not stop an older pod.
func Decode(key, value []byte, offset int64) (*Record, error) {
	k := string(key)
	r := &Record{Offset: offset}
	if value == nil {
		return nil, nil // a tombstone: nothing to decide on
	}
	var target any
	switch {
	case strings.HasPrefix(k, "hb/"):
		r.Heartbeat = &Heartbeat{}
		target = r.Heartbeat
	case strings.HasPrefix(k, "claim/"):
		r.Claim = &Claim{}
		target = r.Claim
	case strings.HasPrefix(k, "release/"):
		r.Release = &Release{}
		target = r.Release
	case strings.HasPrefix(k, "cmd/"):
		r.Command = &Command{}
		target = r.Command
	default:
		return nil, nil
	}
	if err := json.Unmarshal(value, target); err != nil {
		return nil, fmt.Errorf("coordination record %q at offset %d: %w", k, offset, err)
	}
	return r, nil
}

// Encode gives the key and value a record is published with.
func Encode(v any) (key, value []byte) {
	value, _ = json.Marshal(v)
	switch x := v.(type) {
	case *Heartbeat:
		return []byte("hb/" + x.Pod), value
	case *Claim:
		return []byte(fmt.Sprintf("claim/%d/%s", x.Epoch, x.Pod)), value
	case *Release:
		return []byte("release/" + strconv.FormatInt(x.Epoch, 10)), value
	}
	panic(fmt.Sprintf("ha: cannot encode %T", v))
}

// Config is the part of stoatflow.ha the decisions use.
type Config struct {
	Pod string
	// Incarnation is unique to this run of the pod (a random id).
	Incarnation           string
	Heartbeat             time.Duration
	StalenessMisses       int
	AcceptableRecoveryLag int64
	FailoverPriority      int
	PromotionGrace        time.Duration
}

// Staleness is how long a pod may be silent before it counts as gone.
func (c Config) Staleness() time.Duration { return c.Heartbeat * time.Duration(c.StalenessMisses) }

// Action is what the runtime must do.
type Action struct {
	// Claim, when set, is to be published.
	Claim *Claim
	// Release, when set, is to be published (after the active drained and
	// committed: the runtime calls Released once it has).
	Release *Release
	// Promote: this pod won token epoch PromoteEpoch; fence, drain, run.
	Promote      bool
	PromoteEpoch int64
	// Demote: another pod holds the token; stop processing at once and
	// become a standby.
	Demote bool
	// Handoff: an operator asked this active to hand over; drain and
	// commit, then call HandedOff.
	Handoff   bool
	HandoffTo string
	Force     bool
}

type peer struct {
	hb      Heartbeat
	arrived time.Time // local monotonic time of the last heartbeat
	// ownSince counts this pod's own heartbeats in the log after the
	// peer's last one. A peer is gone only when its silence shows in the
	// log's order as well as on the local clock: a pod that was itself
	// stalled (CPU starvation, a GC pause) and then reads an old fetch
	// sees every peer silent on its clock, but its own heartbeats, which
	// it could not send while stalled, are not in the log between.
	ownSince int
}

// Node is one pod's view.
type Node struct {
	cfg Config

	peers map[string]*peer

	epoch      int64  // current token epoch (0: never claimed)
	holder     string // pod holding it ("" none)
	epochAt    time.Time
	released   bool   // the holder released epoch, to releaseTo if set
	releaseTo  string // designated successor
	claimedFor int64  // the epoch this pod last claimed (0 none)

	role     string
	state    string
	lag      int64
	lagMs    int64
	caughtUp bool // the local view of the coordination topic is current

	activeGoneSince time.Time // when this pod first saw no live active
	handingOff      bool
	stopping        bool
}

// New starts a node as a standby that knows nothing yet.
func New(cfg Config) *Node {
	return &Node{cfg: cfg, peers: map[string]*peer{}, role: RoleStandby, state: StateCatchingUp}
}

// Role and State of this pod.
func (n *Node) Role() string  { return n.role }
func (n *Node) State() string { return n.state }

// Token is the current epoch and holder.
func (n *Node) Token() (int64, string) { return n.epoch, n.holder }

// SetLag records this pod's replication lag (records behind the
// changelogs' committed end, and how old the newest unapplied change is).
func (n *Node) SetLag(records, ms int64) {
	n.lag, n.lagMs = records, ms
	if n.role == RoleStandby && !n.handingOff {
		if records <= n.cfg.AcceptableRecoveryLag {
			n.state = StateReadyStandby
		} else {
			n.state = StateCatchingUp
		}
	}
}

// SetCaughtUp records whether this pod has read the coordination topic to
// its end recently; decisions wait while it has not.
func (n *Node) SetCaughtUp(ok bool) { n.caughtUp = ok }

// CaughtUp reports the tail's freshness.
func (n *Node) CaughtUp() bool { return n.caughtUp }

// Stopping marks the pod as leaving (SIGTERM): it claims nothing more.
func (n *Node) Stopping() { n.stopping = true }

// Heartbeat is the record this pod publishes now.
func (n *Node) Heartbeat(generation int64) *Heartbeat {
	return &Heartbeat{Pod: n.cfg.Pod, Role: n.role, State: n.state, LagRecords: n.lag, LagMs: n.lagMs,
		Priority: n.cfg.FailoverPriority, Generation: generation, TokenEpoch: n.epoch, Stopping: n.stopping,
		Incarnation: n.cfg.Incarnation}
}

// Observe applies one record of the coordination topic, read in order.
func (n *Node) Observe(r *Record, now time.Time) Action {
	var a Action
	switch {
	case r.Heartbeat != nil:
		hb := *r.Heartbeat
		if hb.Pod == n.cfg.Pod {
			// Our own: we know our state better, but it measures the
			// others' silence in the log's order.
			if hb.Incarnation == n.cfg.Incarnation {
				for _, p := range n.peers {
					p.ownSince++
				}
			}
			return a
		}
		p := n.peers[hb.Pod]
		if p == nil {
			p = &peer{}
			n.peers[hb.Pod] = p
		}
		p.hb, p.arrived, p.ownSince = hb, now, 0
	case r.Claim != nil:
		c := r.Claim
		if c.Epoch != n.epoch+1 || c.Prev != n.epoch {
			return a // a late claim of a decided epoch, or of a future one
		}
		// The first claim of the next epoch wins.
		n.epoch, n.holder, n.epochAt = c.Epoch, c.Pod, now
		n.released, n.releaseTo, n.activeGoneSince = false, "", time.Time{}
		if c.Pod == n.cfg.Pod && c.Incarnation == n.cfg.Incarnation {
			n.role, n.state = RoleActive, StatePromoting
			a.Promote, a.PromoteEpoch = true, c.Epoch
		} else if n.role == RoleActive || n.handingOff {
			n.role, n.state, n.handingOff = RoleStandby, StateCatchingUp, false
			a.Demote = true
		}
	case r.Release != nil:
		if r.Release.Epoch == n.epoch {
			n.released, n.releaseTo = true, r.Release.To
		}
	case r.Command != nil:
		c := r.Command
		if n.role != RoleActive || n.state != StateActive || n.handingOff {
			return a
		}
		switch c.Command {
		case CmdSwitch:
		case CmdDemote:
			if c.Target != n.cfg.Pod {
				return a
			}
		case CmdPromote:
			if c.Target == n.cfg.Pod {
				return a
			}
		default:
			return a
		}
		n.handingOff, n.state = true, StateHandingOff
		a.Handoff, a.Force = true, c.Force
		if c.Command == CmdPromote {
			a.HandoffTo = c.Target
		}
	}
	return a
}

// Promoted tells the node the promotion finished: it is processing.
// It also ends a handoff nobody took up: the pod keeps the token, and a
// later command is heard again.
func (n *Node) Promoted() { n.state, n.handingOff = StateActive, false }

// HandedOff tells the node the active drained and committed; it returns
// the release to publish. The pod stays active until a claim of the next
// epoch arrives, and then demotes in place.
func (n *Node) HandedOff(to string, force bool) *Release {
	return &Release{Pod: n.cfg.Pod, Epoch: n.epoch, To: to, Force: force}
}

// Demoted tells the node the pod runs as a standby again (after a failed
// promotion, or a demotion it carried out).
func (n *Node) Demoted() {
	n.role, n.handingOff = RoleStandby, false
	n.state = StateCatchingUp
}

// gone reports whether a peer has been silent for the staleness window
// on the local clock and for as many of this pod's own heartbeats in the
// log.
func (n *Node) gone(p *peer, now time.Time) bool {
	return now.Sub(p.arrived) > n.cfg.Staleness() && p.ownSince >= n.cfg.StalenessMisses
}

func (n *Node) live(now time.Time) map[string]*peer {
	out := map[string]*peer{}
	for id, p := range n.peers {
		if !n.gone(p, now) && !p.hb.Stopping {
			out[id] = p
		}
	}
	return out
}

// activeAlive reports whether the token holder is alive and acting:
// heartbeats arriving and not released.
func (n *Node) activeAlive(now time.Time) bool {
	if n.holder == "" || n.released {
		return false
	}
	if n.holder == n.cfg.Pod {
		return n.role == RoleActive
	}
	p := n.peers[n.holder]
	if p == nil {
		// Not heard since we started: give it one staleness window from
		// when its claim arrived.
		return now.Sub(n.epochAt) <= n.cfg.Staleness()
	}
	if n.gone(p, now) {
		return false
	}
	return p.hb.Role == RoleActive && p.hb.TokenEpoch >= n.epoch || now.Sub(n.epochAt) <= n.cfg.Staleness()
}

// candidate is a standby in the ranking.
type candidate struct {
	pod      string
	lag      int64
	priority int
}

// Rank orders candidates: least lag first, then higher failover priority,
// then a stable hash of the pod id, so every pod computes the same order.
func Rank(cs []candidate) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.lag != b.lag {
			return a.lag < b.lag
		}
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		return podHash(a.pod) < podHash(b.pod)
	})
}

func podHash(p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p))
	return h.Sum64()
}

// Tick decides, as time passes, whether this pod should claim the token.
func (n *Node) Tick(now time.Time) Action {
	var a Action
	if !n.caughtUp || n.stopping || n.role == RoleActive || n.handingOff {
		return a
	}
	if n.activeAlive(now) {
		n.activeGoneSince = time.Time{}
		return a
	}
	if n.activeGoneSince.IsZero() {
		n.activeGoneSince = now
	}
	next := n.epoch + 1
	if n.claimedFor == next {
		return a // our claim is on its way or lost; the log decides
	}
	if n.released && n.releaseTo != "" && n.releaseTo != n.cfg.Pod {
		// A handoff to a named successor: only it claims, unless it is
		// gone.
		if _, ok := n.live(now)[n.releaseTo]; ok {
			return a
		}
	}
	var cs []candidate
	me := candidate{pod: n.cfg.Pod, lag: n.lag, priority: n.cfg.FailoverPriority}
	cs = append(cs, me)
	for id, p := range n.live(now) {
		if id == n.holder && !n.released {
			continue
		}
		if p.hb.Role != RoleStandby {
			continue
		}
		cs = append(cs, candidate{pod: id, lag: p.hb.LagRecords, priority: p.hb.Priority})
	}
	designated := n.released && n.releaseTo == n.cfg.Pod
	eligible := cs[:0:0]
	for _, c := range cs {
		if c.lag <= n.cfg.AcceptableRecoveryLag {
			eligible = append(eligible, c)
		}
	}
	reason := "failover"
	if n.released {
		reason = "handoff"
	}
	var pick []candidate
	switch {
	case designated:
		pick = []candidate{me}
	case len(eligible) > 0:
		pick = eligible
	case now.Sub(n.activeGoneSince) >= n.cfg.PromotionGrace:
		// Availability first: the least-behind takes over (it still
		// drains fully before it processes).
		pick = cs
		reason += " (no standby within acceptable-recovery-lag)"
	default:
		return a
	}
	Rank(pick)
	if pick[0].pod != n.cfg.Pod {
		return a
	}
	n.claimedFor = next
	a.Claim = &Claim{Pod: n.cfg.Pod, Incarnation: n.cfg.Incarnation, Epoch: next, Prev: n.epoch, Lag: n.lag, Reason: reason}
	return a
}

// ClaimFailed lets the node claim again (the publish failed).
func (n *Node) ClaimFailed() { n.claimedFor = 0 }

// PeerView is one peer as /ha/status shows it.
type PeerView struct {
	Heartbeat
	FreshnessMs int64 `json:"freshnessMs"`
	// Live: heard from within failure detection (see Node.gone) and not
	// stopping.
	Live bool `json:"live"`
}

// Peers lists the pods heard from, freshest first by id.
func (n *Node) Peers(now time.Time) []PeerView {
	var out []PeerView
	for _, p := range n.peers {
		out = append(out, PeerView{Heartbeat: p.hb, FreshnessMs: now.Sub(p.arrived).Milliseconds(), Live: !n.gone(p, now) && !p.hb.Stopping})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// ReadyStandbys counts live standbys that are caught up, this pod
// included when it is one.
func (n *Node) ReadyStandbys(now time.Time) int {
	c := 0
	if n.role == RoleStandby && n.state == StateReadyStandby {
		c++
	}
	for _, p := range n.live(now) {
		if p.hb.Role == RoleStandby && p.hb.State == StateReadyStandby {
			c++
		}
	}
	return c
}

// ActiveLive reports whether some pod is active and heard from.
func (n *Node) ActiveLive(now time.Time) bool { return n.activeAlive(now) }
