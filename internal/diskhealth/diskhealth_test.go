package diskhealth

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/vfs"
)

type fakeVolume struct {
	mu          sync.Mutex
	free, total int64
}

func (v *fakeVolume) set(free int64) { v.mu.Lock(); v.free = free; v.mu.Unlock() }
func (v *fakeVolume) statfs(string) (int64, int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.free, v.total, nil
}

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newTest(reserve int64, stall time.Duration) (*Monitor, *fakeVolume, *syncLog) {
	v := &fakeVolume{free: 100 << 20, total: 1 << 30}
	out := &syncLog{}
	m := New(Config{Dir: "/data", ReserveBytes: reserve, StallAfter: stall, Statfs: v.statfs,
		Logger: slog.New(slog.NewTextHandler(out, nil)), LogEvery: time.Hour})
	return m, v, out
}

func TestReserveAndResume(t *testing.T) {
	m, v, out := newTest(10<<20, 0)
	m.Poll()
	if err := m.CheckWrite(); err != nil || m.Degraded() != "" {
		t.Fatalf("healthy disk: %v %q", err, m.Degraded())
	}
	v.set(9 << 20)
	m.Poll()
	if err := m.CheckWrite(); !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("below the reserve: %v", err)
	}
	if m.Degraded() != "disk full" {
		t.Fatalf("degraded %q", m.Degraded())
	}
	// Not above the reserve by enough: still full.
	v.set(15 << 20)
	m.Poll()
	if !m.Full() {
		t.Fatal("resumed without the margin")
	}
	v.set(20 << 20)
	m.Poll()
	m.Poll()
	if m.Full() {
		t.Fatal("still full with twice the reserve free")
	}
	st := m.Status()
	if st.RefusedWrites != 1 || st.FullEvents != 1 || st.FreeBytes != 20<<20 || st.ReserveBytes != 10<<20 {
		t.Fatalf("status %+v", st)
	}
	if n := strings.Count(out.String(), "disk full;"); n != 1 {
		t.Fatalf("logged full %d times:\n%s", n, out)
	}
	if !strings.Contains(out.String(), "appends resume") {
		t.Fatalf("no resume line:\n%s", out)
	}
}

func TestAutomaticReserve(t *testing.T) {
	m, v, _ := newTest(-1, 0)
	v.total = 100 << 20
	v.set(4 << 20)
	m.Poll()
	if !m.Full() || m.Status().ReserveBytes != 5<<20 {
		t.Fatalf("5%% of 100 MiB reserve: %+v", m.Status())
	}
}

func TestWriteFailureMakesFull(t *testing.T) {
	m, v, _ := newTest(0, 0)
	fs := vfs.NewMem()
	w := m.FS(fs)
	f, err := w.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	fs.FailNext(vfs.OpWrite, "a", fmt.Errorf("write a: %w", syscall.ENOSPC))
	if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: %v", err)
	}
	if !m.Full() {
		t.Fatal("ENOSPC did not make the disk full")
	}
	// Other errors do not.
	m2, _, _ := newTest(0, 0)
	m2.Observe(syscall.EIO)
	if m2.Full() {
		t.Fatal("EIO made the disk full")
	}
	// Space shows: 1 MiB more than the (zero) reserve. A failed write
	// outweighs statfs for writeFullHold (a quota does not show in it).
	v.set(2 << 20)
	m.Poll()
	if !m.Full() {
		t.Fatal("statfs ended a full state a failed write began, at once")
	}
	m.mu.Lock()
	m.fullSince = m.fullSince.Add(-writeFullHold)
	m.mu.Unlock()
	m.Poll()
	if m.Full() {
		t.Fatal("still full after the hold")
	}
}

func TestStall(t *testing.T) {
	m, _, out := newTest(0, 50*time.Millisecond)
	id := m.syncBegin()
	m.Poll()
	if m.Degraded() != "" {
		t.Fatal("stalled at once")
	}
	time.Sleep(80 * time.Millisecond)
	// Seen while the fsync still runs, not only when it returns.
	m.Poll()
	if m.Degraded() != "fsync stalled" {
		t.Fatalf("degraded %q with an fsync running 80ms over a 50ms bound", m.Degraded())
	}
	m.syncEnd(id)
	m.Poll()
	if !m.Status().Stalled {
		t.Fatal("cleared at once; want after fsyncs kept under the bound for a while")
	}
	m.pollStall(time.Now().Add(stallClears + time.Second))
	if m.Status().Stalled {
		t.Fatal("still stalled after fsyncs kept under the bound")
	}
	if m.Status().StallEvents != 1 || !strings.Contains(out.String(), "fsyncs are fast again") {
		t.Fatalf("status %+v, log:\n%s", m.Status(), out)
	}
}

// TestWritesReadFreeSpaceBeforeTheReserveIsGone: a writer much faster than
// the poll interval cannot run through the reserve unseen. The volume
// loses what is written; with no Poll at all, the disk turns full while
// the reserve is still nearly whole.
func TestWritesReadFreeSpaceBeforeTheReserveIsGone(t *testing.T) {
	const reserve, chunk = 2 << 20, 64 << 10
	m, v, _ := newTest(reserve, 0)
	v.set(40 << 20)
	m.Poll()
	fs := m.FS(vfs.NewMem())
	f, err := fs.Create("seg")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, chunk)
	for i := 0; m.CheckWrite() == nil; i++ {
		if i > 1000 {
			t.Fatal("40 MiB written and the disk never turned full")
		}
		v.mu.Lock()
		v.free -= chunk
		v.mu.Unlock()
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	free, _, _ := v.statfs("")
	if free < reserve-2*minBudget {
		t.Fatalf("turned full with %d bytes free: the reserve of %d was spent", free, reserve)
	}
	if free >= reserve {
		t.Fatalf("turned full with %d bytes free, above the reserve of %d", free, reserve)
	}
	// Writing into space the volume already gave (no free space lost) reads
	// statfs and never makes a healthy disk full.
	v.set(40 << 20)
	m.Poll()
	if m.Full() {
		t.Fatal("still full")
	}
	m.Poll()
	for range 2000 {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if m.Full() {
		t.Fatal("overwrites of reserved space made a disk with 40 MiB free look full")
	}
}

// TestWritesDoNotReadAFailingStatfsEachTime: when statfs fails, a writer
// that asked is not asking again at its next write, but a budget later.
func TestWritesDoNotReadAFailingStatfsEachTime(t *testing.T) {
	calls := 0
	m := New(Config{Dir: "/data", ReserveBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler), LogEvery: time.Hour,
		Statfs: func(string) (int64, int64, error) {
			calls++
			if calls == 1 {
				return 1 << 20, 1 << 30, nil // at the reserve: budget minBudget
			}
			return 0, 0, errors.New("statfs: input/output error")
		}})
	m.Poll()
	f, err := m.FS(vfs.NewMem()).Create("seg")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<10)
	for range 4 * minBudget / len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if calls < 2 || calls > 5 {
		t.Fatalf("statfs read %d times for 4 budgets of writes, want one per budget", calls)
	}
}
