package replication

import "slices"

// Role is a replica's configured Replication.Role.
type Role int

const (
	// RoleFollower is Role "follower".
	RoleFollower Role = iota
	// RoleLeader is Role "leader".
	RoleLeader
	// RoleBoth is Role "both".
	RoleBoth
)

// ParseRole maps a configured Role string to a Role; unknown strings are
// followers (never eligible before an ISR exists).
func ParseRole(s string) Role {
	switch s {
	case "leader":
		return RoleLeader
	case "both":
		return RoleBoth
	}
	return RoleFollower
}

// Candidacy is what a replica knows when deciding whether it may stand
// for election.
type Candidacy struct {
	// Self is this replica's id.
	Self int32
	// ISR is the ISR as recorded in this replica's own Raft log.
	ISR []int32
	// HasISR is false until the Raft log holds any ISR.
	HasISR bool
	// Role is the configured role.
	Role Role
	// UncleanRestart is set when this replica restarted after an unclean
	// shutdown and has not caught up with a leader since (KIP-966). The
	// owner clears it once the replica has fetched up to a leader's high
	// watermark. While every ISR member carries it no replica is eligible:
	// that is the price of never electing a replica that may have lost
	// acknowledged data.
	UncleanRestart bool
}

// Eligible reports whether the replica may stand for election: it is in
// the ISR of its own Raft log (before any ISR exists: its Role is leader
// or both), and it has not restarted uncleanly without catching up since.
func (c Candidacy) Eligible() bool {
	if c.UncleanRestart {
		return false
	}
	if !c.HasISR {
		return c.Role == RoleLeader || c.Role == RoleBoth
	}
	return slices.Contains(c.ISR, c.Self)
}

// Eligible reports whether self may stand for election: only members of
// the ISR recorded in its own Raft log, which hold every acknowledged
// record, or, before any ISR exists, a replica whose Role is leader or
// both.
func Eligible(self int32, raftLogISR []int32, role Role, hasISR bool) bool {
	return Candidacy{Self: self, ISR: raftLogISR, HasISR: hasISR, Role: role}.Eligible()
}

// MustHandOff reports whether a replica whose leadership claim has
// committed must transfer leadership instead of serving: judged against
// the ISR committed in the Raft log at that point, it would not have been
// eligible (it is outside the ISR, so it may lack acknowledged records).
// It then serves no client and transfers Raft leadership to an ISR member.
func MustHandOff(self int32, committedISR []int32, role Role, hasISR bool) bool {
	return !Eligible(self, committedISR, role, hasISR)
}

// MustHandOff reports whether a leader with this candidacy, judged against
// the committed Raft log, must transfer leadership.
func (c Candidacy) MustHandOff() bool { return !c.Eligible() }
