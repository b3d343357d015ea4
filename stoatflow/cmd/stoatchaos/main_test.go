package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// TestPlanIsSeeded: the schedule is a function of the seed and the kinds,
// and starts with one step of every kind.
func TestPlanIsSeeded(t *testing.T) {
	kinds, err := parseKinds("all", 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := plan(9, kinds), plan(9, kinds), plan(10, kinds)
	same, seen := true, map[Kind]bool{}
	for i := 0; i < 50; i++ {
		sa, sb, sc := a(), b(), c()
		if sa != sb {
			t.Fatalf("step %d: %v and %v from one seed", i, sa, sb)
		}
		same = same && sa == sc
		if i < len(kinds) {
			seen[sa.Kind] = true
		}
	}
	if same {
		t.Error("seeds 9 and 10 gave the same schedule")
	}
	if len(seen) != len(kinds) {
		t.Errorf("the first %d steps cover %d kinds, want all", len(kinds), len(seen))
	}
	if _, err := parseKinds("switch", 1, 1); err == nil {
		t.Error("switch accepted with one pod")
	}
	if ks, err := parseKinds("-switch,-crashpoint", 3, 1); err != nil || len(ks) != 5 {
		t.Errorf("exclusions: %v %v", ks, err)
	}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestShortRun runs the command's main logic for 30 s against three
// active-standby pods with a fixed seed: no anomaly, and a report that
// says so and shows the faults and checks it ran.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for about a minute")
	}
	report := filepath.Join(t.TempDir(), "short.html")
	res := Run(Config{Seed: 3, Duration: 30 * time.Second, Pods: 3, Replicas: 1, CheckEvery: 4, Report: report, Out: logWriter{t}})
	if !res.OK() {
		t.Fatalf("%s\nanomalies: %q\nharness: %q\n(run directory %s)", res.Summary(), res.Anomalies, res.Harness, res.RunDir)
	}
	if res.ExitCode() != 0 {
		t.Errorf("exit code %d for a run without anomalies", res.ExitCode())
	}
	kinds := map[Kind]bool{}
	takeovers := 0
	for _, f := range res.Faults {
		kinds[f.Kind] = true
		if f.Takeover {
			takeovers++
		}
	}
	if len(res.Faults) < 4 || len(kinds) < 3 || takeovers < 2 {
		t.Errorf("%d faults of %d kinds, %d takeovers in 30s: want at least 4 faults of 3 kinds and 2 takeovers", len(res.Faults), len(kinds), takeovers)
	}
	if n := len(res.Checks); n < 2 || !res.Checks[n-1].Final {
		t.Errorf("%d checks, the last final=%v: want a check mid-run and a final one", n, n > 0 && res.Checks[n-1].Final)
	}
	for _, c := range res.Checks {
		if c.Lines == 0 || c.Report.Updates == 0 || !c.Report.OK() {
			t.Errorf("check after fault %d: %d lines, %s", c.AfterFault, c.Lines, c.Report)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"PASS: no anomalies", "<svg", "Takeover times", "Exactly-once checks", "seed 3"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for k := range kinds {
		if !strings.Contains(page, string(k)) {
			t.Errorf("the report does not name fault %s", k)
		}
	}
	for _, ext := range []string{"<script", `src="`, `href="`, "<link"} {
		if strings.Contains(page, ext) {
			t.Errorf("the report is not self-contained: it has %s", ext)
		}
	}
	var sum summaryJSON
	jb, err := os.ReadFile(jsonPath(report))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jb, &sum); err != nil {
		t.Fatal(err)
	}
	if !sum.OK || len(sum.Faults) != len(res.Faults) || sum.Takeover.Count != takeovers || sum.Takeover.MaxMs <= 0 {
		t.Errorf("JSON summary: ok=%v, %d faults (run: %d), %d takeovers (run: %d), max %.0f ms", sum.OK, len(sum.Faults), len(res.Faults), sum.Takeover.Count, takeovers, sum.Takeover.MaxMs)
	}
	t.Log(res.Summary())
}
