package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestLoginFailureDelays(t *testing.T) {
	var f LoginFailures
	now := time.Unix(1000, 0)
	var got []time.Duration
	for i := 0; i < 8; i++ {
		got = append(got, f.Record("10.0.0.1", now))
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	// Another address starts small; the first one is forgiven after a
	// quiet spell.
	if d := f.Record("10.0.0.2", now); d != failureBaseDelay {
		t.Fatalf("a fresh address waits %v", d)
	}
	if d := f.Record("10.0.0.1", now.Add(failureMemory+time.Second)); d != failureBaseDelay {
		t.Fatalf("after %v without failures the delay is %v", failureMemory, d)
	}
	// The table stays bounded whatever the number of addresses.
	for i := 0; i < 3*failureMaxIPs; i++ {
		f.Record(fmt.Sprintf("10.1.%d.%d", i/256, i%256), now)
	}
	if n := len(f.byIP); n > failureMaxIPs {
		t.Fatalf("%d addresses remembered", n)
	}
}
