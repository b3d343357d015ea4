package meta

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestLeaderEpoch(t *testing.T) {
	for _, c := range []struct {
		base, term, want int32
		ok               bool
	}{
		{0, 0, 0, true},
		{2, 5, 7, true},
		{-3, 9, 6, true},
		{-3, 2, 0, false},
		{math.MaxInt32, 0, math.MaxInt32, true},
		{math.MaxInt32, 1, 0, false},
		{1, math.MaxInt32, 0, false},
	} {
		got, ok := LeaderEpoch(c.base, c.term)
		if got != c.want || ok != c.ok {
			t.Errorf("LeaderEpoch(%d, %d) = %d, %v; want %d, %v", c.base, c.term, got, ok, c.want, c.ok)
		}
	}
}

// TestCutOverBase: the base always puts the new owner one above the old
// epoch, at any term of the new owner, and says so when it cannot.
func TestCutOverBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 10000 {
		highest, term := rng.Int32N(1000), rng.Int32N(1000)
		if rng.IntN(10) == 0 {
			highest = math.MaxInt32 - rng.Int32N(3)
		}
		if rng.IntN(10) == 0 {
			term = math.MaxInt32 - rng.Int32N(3)
		}
		base, ok := CutOverBase(highest, term)
		e, eok := LeaderEpoch(base, term)
		if ok != (highest < math.MaxInt32) {
			t.Fatalf("CutOverBase(%d, %d) ok=%v", highest, term, ok)
		}
		if ok && (!eok || e != highest+1) {
			t.Fatalf("CutOverBase(%d, %d) = %d: epoch %d, %v", highest, term, base, e, eok)
		}
	}
}
