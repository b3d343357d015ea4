package meta

import "math"

// LeaderEpoch is the leader epoch a partition exposes to clients: its
// epoch base plus its owning group's term. Within one owner it rises with
// the group's term, which only rises; across a move the new owner's base
// is chosen above the old owner's epoch (CutOverBase). ok is false when
// the sum does not fit Kafka's int32 epoch.
func LeaderEpoch(base, term int32) (epoch int32, ok bool) {
	e := int64(base) + int64(term)
	if e < 0 || e > math.MaxInt32 {
		return 0, false
	}
	return int32(e), true
}

// CutOverBase is the epoch base for a group adopting a partition at term
// targetTerm, after the old owner exposed at most highest: base plus
// targetTerm is highest+1, the next epoch, so clients that fenced on the
// old owner's epochs (KIP-320) accept the new owner's. The base may be
// negative when the adopting group's term is already above highest; the
// exposed epoch never is, since the term only rises. ok is false when
// highest+1 does not fit an int32.
func CutOverBase(highest, targetTerm int32) (base int32, ok bool) {
	b := int64(highest) + 1 - int64(targetTerm)
	if highest == math.MaxInt32 || b < math.MinInt32 || b > math.MaxInt32 {
		return 0, false
	}
	return int32(b), true
}
