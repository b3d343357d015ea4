package recordbatch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteSeedCorpus regenerates testdata/fuzz seeds when
// MOONMQ_WRITE_SEEDS=1; otherwise it is skipped.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("MOONMQ_WRITE_SEEDS") != "1" {
		t.Skip("set MOONMQ_WRITE_SEEDS=1 to regenerate")
	}
	for _, fz := range []string{"FuzzSplit", "FuzzRecords"} {
		dir := filepath.Join("testdata", "fuzz", fz)
		os.MkdirAll(dir, 0o755)
		for i, s := range seeds() {
			if len(s) > 4096 {
				continue
			}
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644)
		}
	}
}
