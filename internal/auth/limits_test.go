package auth

import (
	"testing"
	"time"
)

func TestConnLimits(t *testing.T) {
	l := ConnLimits{Max: 3, PerIP: 2}
	for i, c := range []struct{ ip, want string }{
		{"a", ""}, {"a", ""}, {"a", "MaxConnectionsPerIP"}, {"b", ""}, {"c", "MaxConnections"},
	} {
		if got := l.Admit(c.ip); got != c.want {
			t.Fatalf("connection %d from %s: %q, want %q", i, c.ip, got, c.want)
		}
	}
	l.Release("a")
	if got := l.Admit("c"); got != "" {
		t.Fatalf("after a release: %q", got)
	}
	l.Release("b")
	l.Release("c")
	l.Release("a")
	if l.total != 0 || len(l.byIP) != 0 {
		t.Fatalf("after releasing all: total %d, by address %v", l.total, l.byIP)
	}
	unlimited := ConnLimits{}
	for i := 0; i < 1000; i++ {
		if got := unlimited.Admit("a"); got != "" {
			t.Fatalf("unlimited refused: %s", got)
		}
	}

	now := time.Unix(100, 0)
	if ok, n := l.LogRefusal(now); !ok || n != 0 {
		t.Fatalf("first refusal: log %v, suppressed %d", ok, n)
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.LogRefusal(now.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatal("logged twice within a second")
		}
	}
	if ok, n := l.LogRefusal(now.Add(2 * time.Second)); !ok || n != 5 {
		t.Fatalf("after a second: log %v, suppressed %d, want true, 5", ok, n)
	}
}
