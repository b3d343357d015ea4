package broker

import "testing"

// TestRoleMoves: the failover life cycle moves through the diagram, a
// promotion that finishes after a step-down began does not serve, and a
// move the diagram lacks panics.
func TestRoleMoves(t *testing.T) {
	var s roleState
	steps := []struct {
		from, to role
		ok       bool
	}{
		{roleIdle, roleFollowing, true},
		{roleFollowing, roleIdle, true},
		{roleIdle, rolePromoting, true},
		{rolePromoting, roleServing, true},
		{roleIdle, roleFollowing, false}, // still serving: not moved
	}
	for _, st := range steps {
		if got := s.move(st.from, st.to); got != st.ok {
			t.Fatalf("%s -> %s: moved %v, want %v (role %s)", st.from, st.to, got, st.ok, s.get())
		}
	}
	if !s.serving() || !s.leading() {
		t.Fatalf("role %s: serving %v leading %v", s.get(), s.serving(), s.leading())
	}
	if left := s.stop(); left != roleServing {
		t.Fatalf("stop left %s, want serving", left)
	}
	// A promotion racing a step-down.
	s.move(roleIdle, rolePromoting)
	s.stop()
	if s.move(rolePromoting, roleServing) || s.serving() {
		t.Fatal("a promotion finished after the step-down and serves")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("following -> serving did not panic")
		}
	}()
	s.move(roleFollowing, roleServing)
}
