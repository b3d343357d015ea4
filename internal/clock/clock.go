// Package clock owns the two clocks the broker reads: broker time, which
// only moves forward, for every timestamp the broker writes and every
// decision that compares a timestamp with "now" (retention, compaction
// horizons, producer-id, transactional-id and offsets expiry, transaction
// and session timeouts); and the wall clock, which an operator or NTP may
// step, for reporting how far the two have drifted apart.
//
// Broker time is the wall clock as it read when the Clock was made plus
// the time elapsed since on Go's monotonic clock. A step of the wall clock
// after that (forward or back) does not move it, so nothing is deleted or
// expired earlier, or later, than its limit measured on a clock that only
// moves forward. It starts wherever the wall clock stood at start: a clock
// that was wrong when the process started stays wrong by as much until the
// next start, and time the machine spends suspended does not count (Linux's
// CLOCK_MONOTONIC stops), which only ever makes limits come late.
//
// Durations between two readings in one process (timeouts, rates, lags)
// need neither clock: time.Now carries a monotonic reading and Sub, Since
// and Until use it. What breaks under a step is a wall reading turned into
// a number (UnixMilli and friends) or compared with a stored one.
//
// For tests, and the fault harness, a process's wall clock can be stepped
// while it runs: FromTestEnv reads an offset from the file OffsetFileEnv
// names. The package imports nothing of the project.
package clock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Clock is one process's pair of clocks. It is safe for concurrent use.
type Clock struct {
	// start is time.Now() when the clock was made: its monotonic reading
	// measures broker time.
	start time.Time
	// base is the wall clock at start, without a monotonic reading, so
	// that sums and comparisons of broker times are plain arithmetic.
	base time.Time
	// offset, if set, moves the wall clock (tests only).
	offset *offsetFile
}

// New returns the process's real clocks, broker time starting now.
func New() *Clock { return newClock(nil) }

func newClock(o *offsetFile) *Clock {
	c := &Clock{start: time.Now(), offset: o}
	c.base = c.wallAt(c.start)
	return c
}

// Now is broker time: the wall clock at start plus the monotonic time
// elapsed since. It carries no monotonic reading of its own, so it may be
// stored as Unix milliseconds and compared with what was stored.
func (c *Clock) Now() time.Time { return c.base.Add(time.Since(c.start)) }

// Wall is the wall clock as the process sees it, without a monotonic
// reading: what time.Now().Round(0) says, moved by the test offset if one
// is set. Nothing that decides may compare it with stored timestamps; it
// is here to see how far it is from broker time (Skew).
func (c *Clock) Wall() time.Time { return c.wallAt(time.Now()) }

// Skew is how far the wall clock is ahead of broker time (negative:
// behind). It is zero at start and changes only when the wall clock is
// stepped, slewed apart from the monotonic clock, or the machine was
// suspended.
func (c *Clock) Skew() time.Duration {
	now := time.Now()
	return c.wallAt(now).Sub(c.base.Add(now.Sub(c.start)))
}

func (c *Clock) wallAt(t time.Time) time.Time {
	t = t.Round(0)
	if c.offset != nil {
		t = t.Add(c.offset.get())
	}
	return t
}

// OffsetFileEnv names the environment variable that makes a broker
// process read its wall clock's offset from a file (FromTestEnv). It
// exists for tests and the fault harness (internal/chaos). Never set it in
// production: a process started while the file says +1h starts its broker
// time an hour ahead, as a machine whose clock is an hour fast would.
const OffsetFileEnv = "MOONMQ_TEST_CLOCK_OFFSET_FILE"

// FromTestEnv returns the clocks the value of OffsetFileEnv asks for: the
// real ones for an empty value, else clocks whose wall clock is moved by
// the duration in that file (WriteOffset), re-read at most every
// offsetReread. A missing file is no offset; a file that does not hold a
// duration is an error at start, and is ignored later (the last offset
// read stays).
func FromTestEnv(value string) (c *Clock, stepped bool, err error) {
	if value == "" {
		return New(), false, nil
	}
	o := &offsetFile{path: value}
	if err := o.read(); err != nil {
		return nil, false, fmt.Errorf("%s=%q: %w", OffsetFileEnv, value, err)
	}
	return newClock(o), true, nil
}

// WriteOffset sets the wall clock offset of the processes reading path
// (FromTestEnv) to d. The file is replaced whole, so a reader never sees
// half of it.
func WriteOffset(path string, d time.Duration) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(d.String() + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// offsetReread bounds how often the offset file is read: a step written
// to it is seen within about this long.
const offsetReread = 100 * time.Millisecond

type offsetFile struct {
	path string

	mu     sync.Mutex
	d      time.Duration
	readAt time.Time // monotonic
}

func (o *offsetFile) get() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(o.readAt) >= offsetReread {
		_ = o.readLocked()
	}
	return o.d
}

func (o *offsetFile) read() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.readLocked()
}

func (o *offsetFile) readLocked() error {
	o.readAt = time.Now()
	b, err := os.ReadFile(o.path)
	if errors.Is(err, os.ErrNotExist) {
		o.d = 0
		return nil
	}
	if err != nil {
		return err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		o.d = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("clock offset file %s: %w", o.path, err)
	}
	o.d = d
	return nil
}
