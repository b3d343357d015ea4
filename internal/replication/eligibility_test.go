package replication

import "testing"

func TestEligible(t *testing.T) {
	tests := []struct {
		name   string
		c      Candidacy
		want   bool
		handed bool
	}{
		{"ISR member", Candidacy{Self: 2, ISR: []int32{1, 2}, HasISR: true}, true, false},
		{"outside ISR", Candidacy{Self: 3, ISR: []int32{1, 2}, HasISR: true, Role: RoleLeader}, false, true},
		{"no ISR yet, role leader", Candidacy{Self: 1, Role: RoleLeader}, true, false},
		{"no ISR yet, role both", Candidacy{Self: 1, Role: RoleBoth}, true, false},
		{"no ISR yet, role follower", Candidacy{Self: 1, Role: RoleFollower}, false, true},
		{"empty ISR recorded", Candidacy{Self: 1, HasISR: true, Role: RoleLeader}, false, true},
		{"ISR member after unclean restart", Candidacy{Self: 2, ISR: []int32{1, 2}, HasISR: true, UncleanRestart: true}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Eligible(); got != tc.want {
				t.Errorf("Eligible = %v, want %v", got, tc.want)
			}
			if got := tc.c.MustHandOff(); got != tc.handed {
				t.Errorf("MustHandOff = %v, want %v", got, tc.handed)
			}
			if !tc.c.UncleanRestart {
				if got := Eligible(tc.c.Self, tc.c.ISR, tc.c.Role, tc.c.HasISR); got != tc.want {
					t.Errorf("Eligible() = %v", got)
				}
				if got := MustHandOff(tc.c.Self, tc.c.ISR, tc.c.Role, tc.c.HasISR); got != tc.handed {
					t.Errorf("MustHandOff() = %v", got)
				}
			}
		})
	}
	for s, want := range map[string]Role{"leader": RoleLeader, "both": RoleBoth, "follower": RoleFollower, "": RoleFollower} {
		if ParseRole(s) != want {
			t.Errorf("ParseRole(%q)", s)
		}
	}
}
