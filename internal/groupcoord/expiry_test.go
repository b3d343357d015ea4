package groupcoord

import (
	"slices"
	"testing"
	"time"
)

func TestExpiredOffsets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const retention = 7 * 24 * time.Hour
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	at := func(d time.Duration) committed { return committed{commitMs: ago(d).UnixMilli()} }
	key := func(g, topic string, p int32) offsetKey { return offsetKey{g, topic, p} }

	offsets := map[offsetKey]committed{
		// Empty for 8 days, last commits 9 days ago: expired.
		key("old", "t", 0): at(9 * 24 * time.Hour),
		key("old", "t", 1): at(10 * 24 * time.Hour),
		// Empty for 8 days, but one partition committed 1 day ago (a
		// simple consumer): only the stale partition goes.
		key("simple", "t", 0): at(9 * 24 * time.Hour),
		key("simple", "t", 1): at(24 * time.Hour),
		// Committed long ago, but empty only for a day: kept.
		key("recent", "t", 0): at(30 * 24 * time.Hour),
		// Has members (not in empty): kept however old.
		key("active", "t", 0): at(30 * 24 * time.Hour),
		// Exactly at the retention boundary: expired.
		key("edge", "t", 0): at(retention),
		// An open transaction commits to it: kept.
		key("txn", "t", 0): at(30 * 24 * time.Hour),
		key("txn", "t", 1): at(30 * 24 * time.Hour),
	}
	empty := map[string]time.Time{
		"old":    ago(8 * 24 * time.Hour),
		"simple": ago(8 * 24 * time.Hour),
		"recent": ago(24 * time.Hour),
		"edge":   ago(retention),
		"txn":    ago(30 * 24 * time.Hour),
	}
	pending := map[offsetKey]bool{key("txn", "t", 1): true}

	got := expiredOffsets(offsets, empty, pending, now, retention)
	want := []offsetKey{
		key("edge", "t", 0),
		key("old", "t", 0),
		key("old", "t", 1),
		key("simple", "t", 0),
		key("txn", "t", 0),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("expired:\n got %v\nwant %v", got, want)
	}
	// A millisecond short of the boundary nothing at the edge expires.
	got = expiredOffsets(map[offsetKey]committed{key("edge", "t", 0): at(retention)},
		map[string]time.Time{"edge": ago(retention)}, nil, now.Add(-time.Millisecond), retention)
	if len(got) != 0 {
		t.Fatalf("before the boundary: %v", got)
	}
}
