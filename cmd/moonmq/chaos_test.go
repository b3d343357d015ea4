package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaosCommand runs `moonmq chaos` as people do, short: three replicas
// of the freshly built binary, kills only, ten seconds of faults. It must
// exit 0, print progress lines and the summary, write an HTML report with
// its plots and the brokers' logs beside it, and remove the data
// directories.
func TestChaosCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three broker processes and runs for about 20 s")
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "report.html")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "chaos", "--duration", "10s", "--faults", "kill", "--replicas", "3",
		"--seed", "7", "--rate", "50", "--progress", "2s", "--report", report)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	out := stdout.String()
	if err != nil {
		t.Fatalf("moonmq chaos: %v after %v\nstdout:\n%s\nstderr:\n%s", err, time.Since(start).Round(time.Second), out, stderr.String())
	}
	t.Logf("moonmq chaos took %v", time.Since(start).Round(time.Second))

	progress := regexp.MustCompile(`(?m)^chaos: +\d+s/10s faults=\d+ now=\S+ acked=\d+ unknown=\d+ in-flight=\d+ polled=\d+ leader=\d+ epoch=\d+$`)
	if n := len(progress.FindAllString(out, -1)); n < 2 {
		t.Errorf("%d progress lines, want at least 2:\n%s", n, out)
	}
	for _, want := range []string{
		"moonmq chaos: seed 7, 3 replicas of " + binary,
		"chaos seed 7: 3 replicas, fault phase ",
		"checker: no anomalies",
		"replay: moonmq chaos --seed 7 --duration 10s --replicas 3 --faults kill --rate 50",
		"moonmq chaos: ok, seed 7: no anomalies; report " + report,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^faults: ((kill|power-loss)=\d+ ?)+$`).MatchString(out) {
		t.Errorf("no faults line with kills:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^sends: (\d+) acknowledged, .*; failovers: \d+$`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("no sends line:\n%s", out)
	} else if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Errorf("no record acknowledged:\n%s", out)
	}

	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if !bytes.HasPrefix(page, []byte("<!doctype html>")) || !bytes.Contains(page, []byte("<svg")) || !bytes.Contains(page, []byte("seed 7")) {
		t.Errorf("report %s is not the HTML page with plots (%d bytes): %.300s", report, len(page), page)
	}
	for id := 1; id <= 3; id++ {
		if _, err := os.Stat(filepath.Join(report+".logs", "replica-"+strconv.Itoa(id)+".log")); err != nil {
			t.Errorf("broker log beside the report: %v", err)
		}
	}
	// Without --keep the replicas' data goes.
	if m := regexp.MustCompile(`replicas' data in (\S+) `).FindStringSubmatch(out); m == nil {
		t.Errorf("the data directory is not named:\n%s", out)
	} else if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("data directory %s still there without --keep (%v)", m[1], err)
		os.RemoveAll(m[1])
	}
}

// TestChaosCommandUsage checks the usage errors (exit 2, saying what to
// do) and that `moonmq help` lists the command; no broker starts.
func TestChaosCommandUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "4"}, "groups of 3 or 5"},
		{[]string{"--groups", "4"}, "a cluster of 2 or 3"},
		{[]string{"--faults", "meta-isolate,group-link"}, "need a cluster of groups"},
		{[]string{"--faults", "kill,nope"}, `unknown fault kind "nope"`},
		{[]string{"--faults", "kill,-pause"}, "either list kinds or exclude them"},
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--binary", "/nonexistent/moonmq"}, "is not an executable file"},
		{[]string{"--report", "/nonexistent/dir/r.html"}, "cannot write there"},
		{[]string{"extra"}, "everything is a flag"},
	} {
		out, err := exec.Command(binary, append([]string{"chaos"}, c.args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("moonmq chaos %v: %v, want exit status 2\n%s", c.args, err, out)
		}
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "moonmq chaos -h") {
			t.Errorf("moonmq chaos %v: output lacks %q or the hint:\n%s", c.args, c.want, out)
		}
	}
	out, err := exec.Command(binary, "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "chaos [flags]") {
		t.Errorf("moonmq help: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "chaos", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-tolerate-known") || !strings.Contains(string(out), "Exit status: 0 no anomaly, 1 anomalies") {
		t.Errorf("moonmq chaos -h: %v\n%s", err, out)
	}
}

// TestBinaryDoesNotLinkTesting keeps package testing out of the broker
// binary, which carries the fault harness for `moonmq chaos`
// (internal/chaos and internal/testcluster must not import it).
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") {
			t.Errorf("cmd/moonmq links %s; move what imports it into a _test.go file", p)
		}
	}
}
