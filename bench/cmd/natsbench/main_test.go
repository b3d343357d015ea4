package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestMain lets the test binary serve as a cluster node: startCluster
// re-executes os.Executable(), which under `go test` is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveNodeArg {
		if err := serveNode(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	out := filepath.Join(t.TempDir(), "nats.json")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--replicas", "3", "--records", "100", "--record-size", "100", "--partitions", "2", "--json", out}, &stdout, &stderr)
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
	if len(rep.Results) != 2 || !strings.Contains(strings.Join(rep.Notes, " "), "R3") {
		t.Fatalf("results %d, notes %q", len(rep.Results), rep.Notes)
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.Produce.Records != 100 || r.Consume.Records != int64(100+r.Partitions) {
			t.Errorf("%s: %+v", r.Case, r)
		}
	}
}
