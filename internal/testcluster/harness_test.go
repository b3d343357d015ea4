package testcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// *testing.T and testing.TB are Harnesses: every test caller of New,
// Start and chaos.Run passes one.
var (
	_ Harness = (*testing.T)(nil)
	_ Harness = testing.TB(nil)
	_ Harness = (*Standalone)(nil)
)

// TestStandalone checks the program's harness: Fatal stops Do's function
// and becomes its error, Errorf marks it failed and goes on, cleanups run
// newest first at Close, temporary directories live under Dir, which Close
// removes unless asked to keep it.
func TestStandalone(t *testing.T) {
	for _, keep := range []bool{false, true} {
		var out bytes.Buffer
		base := filepath.Join(t.TempDir(), "h")
		h, err := NewStandalone(base, &out)
		if err != nil {
			t.Fatal(err)
		}
		var order []int
		var dir string
		err = h.Do(func() {
			h.Cleanup(func() { order = append(order, 1) })
			h.Cleanup(func() { order = append(order, 2) })
			dir = h.TempDir()
			h.Logf("hello %d", 1)
			if h.Failed() {
				t.Error("failed before any error")
			}
			h.Errorf("went on")
			h.Fatalf("stopped at %d", 7)
			t.Error("Fatalf returned")
		})
		if err == nil || err.Error() != "stopped at 7" {
			t.Fatalf("Do: %v", err)
		}
		if !h.Failed() || !strings.Contains(out.String(), "hello 1\n") || !strings.Contains(out.String(), "ERROR: went on\n") {
			t.Errorf("failed=%v output %q", h.Failed(), out.String())
		}
		if !strings.HasPrefix(dir, base+string(filepath.Separator)) {
			t.Errorf("TempDir %s not under %s", dir, base)
		}
		if err := h.Do(func() {}); err != nil {
			t.Errorf("Do of a function that returns: %v", err)
		}
		if err := h.Close(keep); err != nil {
			t.Fatal(err)
		}
		if len(order) != 2 || order[0] != 2 || order[1] != 1 {
			t.Errorf("cleanups ran in order %v, want [2 1]", order)
		}
		_, err = os.Stat(dir)
		if keep != (err == nil) {
			t.Errorf("keep=%v: stat %s after Close: %v", keep, dir, err)
		}
	}
}
