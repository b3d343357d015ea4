package auth

import (
	"testing"
	"time"
)

func TestQuotaThrottle(t *testing.T) {
	q := NewQuotas(ByteRates{ProducerByteRate: 1000}, map[string]ByteRates{"User:free": {}})
	now := time.Unix(1000, 0)
	// 5000 bytes over a fresh 10 s floor: 500 B/s, under the quota.
	if d := q.Record("User:app", ProduceQuota, 5000, now); d != 0 {
		t.Fatalf("within the quota: throttled %v", d)
	}
	// 11000 more: 1600 B/s, 60% over: 0.6 x 11 s.
	if d := q.Record("User:app", ProduceQuota, 11000, now.Add(time.Second)); d != 6600*time.Millisecond {
		t.Fatalf("over the quota: throttled %v, want 6.6s", d)
	}
	// Far over: capped at the window.
	if d := q.Record("User:app", ProduceQuota, 1<<30, now.Add(2*time.Second)); d != quotaWindow {
		t.Fatalf("far over: throttled %v, want %v", d, quotaWindow)
	}
	// Once the window has passed, the old bytes no longer count.
	if d := q.Record("User:app", ProduceQuota, 10, now.Add(30*time.Second)); d != 0 {
		t.Fatalf("a window later: throttled %v", d)
	}
	// Fetches have no quota here, and an override can lift the produce one.
	if d := q.Record("User:app", FetchQuota, 1<<30, now); d != 0 {
		t.Fatalf("fetch without a quota: throttled %v", d)
	}
	if d := q.Record("User:free", ProduceQuota, 1<<30, now); d != 0 {
		t.Fatalf("a principal with an unlimited override: throttled %v", d)
	}
}
