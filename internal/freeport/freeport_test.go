package freeport

import "testing"

// Picks never repeat, even though each probe listener is closed at once and
// the kernel may offer the same port again.
func TestPicksAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	ports, err := PickN(300)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		ports = append(ports, Must(t))
	}
	for _, p := range ports {
		if p <= 0 || p > 65535 {
			t.Fatalf("port %d out of range", p)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
