package clock

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func near(a, b time.Time, within time.Duration) bool {
	d := a.Sub(b)
	return d > -within && d < within
}

func TestRealClockFollowsTheWallClock(t *testing.T) {
	c := New()
	if now := c.Now(); !near(now, time.Now(), 50*time.Millisecond) {
		t.Fatalf("broker time %v, wall clock %v", now, time.Now())
	}
	if s := c.Skew(); s > 50*time.Millisecond || s < -50*time.Millisecond {
		t.Fatalf("skew %v without a step", s)
	}
	a := c.Now()
	time.Sleep(20 * time.Millisecond)
	if d := c.Now().Sub(a); d < 20*time.Millisecond {
		t.Fatalf("broker time moved %v in 20ms", d)
	}
	// Stored and read back, a broker time compares the same: it has no
	// monotonic reading that the round trip would drop.
	if back := time.UnixMilli(a.UnixMilli()); a.Sub(back) >= time.Millisecond || back.After(a) {
		t.Fatalf("%v came back from milliseconds as %v", a, back)
	}
}

// TestStepMovesWallNotBrokerTime steps a clock's wall clock through its
// offset file, +1h and -1h: broker time goes on as if nothing happened,
// and Skew reports each step.
func TestStepMovesWallNotBrokerTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	c, stepped, err := FromTestEnv(path)
	if err != nil || !stepped {
		t.Fatalf("FromTestEnv: %v %v", stepped, err)
	}
	for _, step := range []time.Duration{time.Hour, -time.Hour, 0} {
		if err := WriteOffset(path, step); err != nil {
			t.Fatal(err)
		}
		time.Sleep(offsetReread + 20*time.Millisecond)
		if now := c.Now(); !near(now, time.Now(), 50*time.Millisecond) {
			t.Fatalf("offset %v: broker time %v, real time %v", step, now, time.Now())
		}
		if w := c.Wall(); !near(w, time.Now().Add(step), 50*time.Millisecond) {
			t.Fatalf("offset %v: wall clock %v, want %v", step, w, time.Now().Add(step))
		}
		if s := c.Skew(); s-step > 50*time.Millisecond || step-s > 50*time.Millisecond {
			t.Fatalf("offset %v: skew %v", step, s)
		}
	}
}

// TestStartedWhileStepped: a process started while its wall clock is an
// hour fast starts broker time an hour fast, as on a machine whose clock
// is wrong; stepping the clock back shows as a skew of -1h.
func TestStartedWhileStepped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	if err := WriteOffset(path, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, _, err := FromTestEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	if now := c.Now(); !near(now, time.Now().Add(time.Hour), 50*time.Millisecond) {
		t.Fatalf("broker time %v, want an hour ahead of %v", now, time.Now())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(offsetReread + 20*time.Millisecond)
	if s := c.Skew(); s > -time.Hour+50*time.Millisecond || s < -time.Hour-50*time.Millisecond {
		t.Fatalf("skew %v after the offset file went, want -1h", s)
	}
}

func TestOffsetFileErrors(t *testing.T) {
	if c, stepped, err := FromTestEnv(""); err != nil || stepped || c.offset != nil {
		t.Fatalf("empty value: %v %v %v", c, stepped, err)
	}
	path := filepath.Join(t.TempDir(), "offset")
	if err := os.WriteFile(path, []byte("an hour"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FromTestEnv(path); err == nil {
		t.Fatal("a file without a duration was accepted at start")
	}
	if err := WriteOffset(path, 0); err != nil {
		t.Fatal(err)
	}
	c, _, err := FromTestEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteOffset(path, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(offsetReread + 20*time.Millisecond)
	if s := c.Skew(); s < 2*time.Hour-50*time.Millisecond || s > 2*time.Hour+50*time.Millisecond {
		t.Fatalf("skew %v, want 2h", s)
	}
	// Later, a damaged file keeps the last offset read.
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(offsetReread + 20*time.Millisecond)
	if s := c.Skew(); s < 2*time.Hour-50*time.Millisecond || s > 2*time.Hour+50*time.Millisecond {
		t.Fatalf("skew %v after the file was damaged, want the last offset, 2h", s)
	}
}

// TestConcurrentSteps reads both clocks from many goroutines while the
// offset file changes (run with -race): broker time never goes back.
func TestConcurrentSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	c, _, err := FromTestEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := c.Now()
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := c.Now()
				if now.Before(last) {
					t.Errorf("broker time went back from %v to %v", last, now)
					return
				}
				last = now
				_ = c.Wall()
				_ = c.Skew()
			}
		})
	}
	for i := range 6 {
		d := time.Hour
		if i%2 == 1 {
			d = -time.Hour
		}
		if err := WriteOffset(path, d); err != nil {
			t.Fatal(err)
		}
		time.Sleep(offsetReread)
	}
	close(stop)
	wg.Wait()
}
