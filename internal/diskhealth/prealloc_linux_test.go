package diskhealth

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/vfs"
)

// TestPreallocationCountsAsSpent: reserving space ahead of appends takes
// it from the volume as writes do, so it brings the next statfs reading
// as near as they would.
func TestPreallocationCountsAsSpent(t *testing.T) {
	calls := 0
	m := New(Config{Dir: "/data", ReserveBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler), LogEvery: time.Hour,
		Statfs: func(string) (int64, int64, error) {
			calls++
			return 1 << 20, 1 << 30, nil // at the reserve: budget minBudget
		}})
	m.Poll()
	f, err := m.FS(vfs.Default).Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := vfs.Preallocate(f, 4*minBudget); err != nil {
		t.Fatalf("preallocate: %v", err)
	}
	if calls != 2 {
		t.Fatalf("statfs read %d times after preallocating 4 budgets, want 2 (the poll and one for the reservation)", calls)
	}
}

// TestFullDiskKeepsReservedBlocks: an injected full disk refuses what a
// full ext4 volume refuses (new blocks, by write or by reservation) and
// lets writes into blocks the file already reserved through, so a log
// that reserved ahead keeps appending into them as it would on a real
// full disk.
func TestFullDiskKeepsReservedBlocks(t *testing.T) {
	dir := t.TempDir()
	faults := filepath.Join(dir, "faults")
	f, err := FaultsFromTestEnv(faults)
	if err != nil {
		t.Fatal(err)
	}
	setFull := func(full bool) {
		t.Helper()
		var lines []string
		if full {
			lines = []string{"full"}
		}
		if err := WriteFaults(faults, lines...); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		err := f.readLocked()
		f.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	fsys := f.FS(vfs.Default)
	file, err := fsys.Create(filepath.Join(dir, "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	rec := make([]byte, 100)
	if _, err := file.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Preallocate(file, 300); err != nil {
		t.Fatalf("reserving on a healthy disk: %v", err)
	}

	setFull(true)
	if err := vfs.Preallocate(file, 400); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("reserving new blocks on a full disk: %v, want ENOSPC", err)
	}
	if err := vfs.Preallocate(file, 250); err != nil {
		t.Fatalf("a reservation within the reserved blocks on a full disk: %v", err)
	}
	for i := 0; i < 2; i++ { // 100..300: the reserved blocks
		if _, err := file.Write(rec); err != nil {
			t.Fatalf("write %d into reserved blocks on a full disk: %v", i, err)
		}
	}
	if _, err := file.Write(rec[:1]); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write past the reserved blocks on a full disk: %v, want ENOSPC", err)
	}

	// Cutting the file cuts its reservation: the blocks are gone.
	if err := file.Truncate(200); err != nil {
		t.Fatal(err)
	}
	if _, err := file.Write(rec[:1]); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write past a truncated reservation on a full disk: %v, want ENOSPC", err)
	}

	setFull(false)
	if _, err := file.Write(rec); err != nil {
		t.Fatalf("write once the disk has room: %v", err)
	}
	got := make([]byte, 300)
	if n, err := file.ReadAt(got, 0); n != 300 || (err != nil && err != io.EOF) {
		t.Fatalf("reading back: %d bytes, %v", n, err)
	}
	if size, err := file.Size(); err != nil || size != 300 {
		t.Fatalf("size %d (%v), want 300: the writes landed where they belong", size, err)
	}
}
