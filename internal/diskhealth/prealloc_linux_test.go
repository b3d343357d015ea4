package diskhealth

import (
	"log/slog"
	"path/filepath"
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
