package broker

import (
	"fmt"
	"sync/atomic"
)

// role is what a replica does with its logs and its clients. Only one
// writer may touch a partition's log at a time: the shipping follower
// (following) or the leader's own appends (promoting, serving), and
// between the two the replica passes through idle, where neither does,
// while the other side's appends drain.
//
//	idle ──> following ──> idle ──> promoting ──> serving
//	  ^                               │             │
//	  └───────────────────────────────┴─────────────┘  (stepDown)
//
// A static leader is serving from the start and never changes; a static
// follower stays idle (its follower writes whenever a leader ships).
type role int32

const (
	// roleIdle: nobody writes; clients are refused as on a follower.
	roleIdle role = iota
	// roleFollowing: the shipping follower may write the logs.
	roleFollowing
	// rolePromoting: this replica leads the group and appends (internal
	// topics while it rebuilds its state from them) but serves no
	// clients yet.
	rolePromoting
	// roleServing: the leader serves clients.
	roleServing
)

func (r role) String() string {
	switch r {
	case roleIdle:
		return "idle"
	case roleFollowing:
		return "following"
	case rolePromoting:
		return "promoting"
	case roleServing:
		return "serving"
	}
	return fmt.Sprintf("role(%d)", int32(r))
}

// roleMoves lists the allowed transitions.
var roleMoves = map[role][]role{
	roleIdle:      {roleFollowing, rolePromoting},
	roleFollowing: {roleIdle},
	rolePromoting: {roleServing, roleIdle},
	roleServing:   {roleIdle},
}

// roleState is a replica's role, read without locks by every request.
type roleState struct{ v atomic.Int32 }

func (s *roleState) get() role { return role(s.v.Load()) }

// move changes the role from `from` to `to` if it is still `from`, and
// reports whether it did: a promotion that finishes after a step-down
// began must not make the replica serve again. A move the diagram does
// not allow is a bug.
func (s *roleState) move(from, to role) bool {
	allowed := false
	for _, r := range roleMoves[from] {
		allowed = allowed || r == to
	}
	if !allowed {
		panic(fmt.Sprintf("broker: replica role %s -> %s is not a transition", from, to))
	}
	return s.v.CompareAndSwap(int32(from), int32(to))
}

// stop moves any role to idle and returns the one it left.
func (s *roleState) stop() role {
	return role(s.v.Swap(int32(roleIdle)))
}

// serving reports whether this replica serves clients.
func (s *roleState) serving() bool { return s.get() == roleServing }

// leading reports whether the leader side runs (its own appends are
// allowed), serving or not yet.
func (s *roleState) leading() bool {
	r := s.get()
	return r == rolePromoting || r == roleServing
}
