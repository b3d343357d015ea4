package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Damage aims at a segment's data: the zeros a killed broker left
// reserved after its last batch are not part of it.
func TestDataEndSkipsReservedZeros(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		data  []byte
		zeros int
		want  int64
	}{
		{"no reserve", []byte("batch"), 0, 5},
		{"reserved tail", []byte("batch"), 200 << 10, 5},
		{"all zeros", nil, 4096, 0},
		{"empty", nil, 0, 0},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, append(c.data, bytes.Repeat([]byte{0}, c.zeros)...), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := dataEnd(path); got != c.want {
			t.Errorf("%s: dataEnd %d, want %d", c.name, got, c.want)
		}
	}
	if got := dataEnd(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("a missing file: dataEnd %d, want 0", got)
	}
}
