package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/moonmq/moonmq/internal/bench"
)

func TestRunEmbedded(t *testing.T) {
	out := filepath.Join(t.TempDir(), "nats.json")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--records", "200", "--record-size", "100", "--partitions", "1,2", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want 4", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.Produce.Records != 200 || r.Consume.Records != int64(200+r.Partitions) || r.Produce.P50Ms <= 0 {
			t.Errorf("%s: %+v", r.Case, r)
		}
	}
}
