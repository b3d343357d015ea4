package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/chaos"
	"github.com/moonmq/moonmq/internal/testcluster"
)

const chaosUsage = `usage: moonmq chaos [flags]

Runs a replication group of this binary's brokers (or --binary's) as
processes on loopback, behind TCP proxies, under a seeded fault schedule
(kills, power loss, pauses, partitions, leader isolation, restarts, segment
corruption) while producers, a transactional producer and consumers work
against it; then heals everything, drains, and checks every client
operation. It prints a progress line while it runs and a summary at the
end, and writes an HTML report. Exit status: 0 no anomaly, 1 anomalies,
2 a usage or harness error. Ctrl-C ends the fault phase early (the run
still heals, checks and reports); a second Ctrl-C aborts.

The seed fixes the fault schedule (not the processes' timing): the same
--seed, --duration, --replicas, --groups and --faults replay the same
faults. --groups 2 or 3 runs a cluster of replication groups (cluster
mode) with the workload's partitions spread over them; each fault hits
one group.
docs/RELIABILITY.md ("Tier 2") describes the faults and the checks.

flags:
`

// chaosCmd is `moonmq chaos`: the fault harness of internal/chaos as a
// command, with a plain harness in place of a test.
func chaosCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), chaosUsage)
		fs.PrintDefaults()
	}
	duration := fs.Duration("duration", 5*time.Minute, "length of the fault phase (setup, healing, draining and checks come on top, about a minute)")
	seed := fs.Int64("seed", 0, "seed of the fault schedule; 0 picks one from the clock and prints it")
	replicas := fs.Int("replicas", 3, "group size: 3 or 5")
	groups := fs.Int("groups", 1, "replication groups: 1, or 2-3 for a cluster of groups (cluster mode)")
	faults := fs.String("faults", "all", "fault kinds: \"all\", a comma-separated list, or -kind,... to leave some out (kinds: "+allKinds()+")")
	rate := fs.Int("rate", 100, "records per second per producer")
	report := fs.String("report", "", "write the HTML report here (default chaos-report-<seed>.html in the current directory); the brokers' logs go beside it into FILE.logs/")
	progress := fs.Duration("progress", 10*time.Second, "interval of the progress line")
	tolerate := fs.Bool("tolerate-known", false, "report the anomalies of known, unfixed broker bugs apart instead of failing on them")
	keep := fs.Bool("keep", false, "keep the replicas' data directories, configurations and logs (the directory is printed)")
	binary := fs.String("binary", "", "moonmq binary the replicas run (default: this executable)")
	var server serverOverrides
	fs.Var(&server, "server", "KEY=VALUE: set a key of every replica's Server block, VALUE in JSON (repeatable), e.g. --server TransactionalIdExpirationMs=5000")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "moonmq chaos: "+format+"\n(moonmq chaos -h lists the flags)\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q: everything is a flag", fs.Arg(0))
	}
	if *duration <= 0 {
		return usageErr("--duration must be positive, for example --duration 5m")
	}
	if *replicas != 3 && *replicas != 5 {
		return usageErr("--replicas %d: the harness runs groups of 3 or 5", *replicas)
	}
	if *groups < 1 || *groups > 3 {
		return usageErr("--groups %d: the harness runs 1 group, or a cluster of 2 or 3", *groups)
	}
	if *rate <= 0 {
		return usageErr("--rate must be a positive number of records per second")
	}
	if *progress <= 0 {
		return usageErr("--progress must be a positive interval, for example --progress 10s")
	}
	kinds, err := chaos.ParseKinds(*faults)
	if err != nil {
		return usageErr("--faults: %v", err)
	}
	if *groups == 1 && !slices.ContainsFunc(kinds, func(k chaos.Kind) bool { return !slices.Contains(chaos.ClusterKinds, k) }) {
		return usageErr("--faults %s: these kinds need a cluster of groups: add --groups 2", *faults)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	if *binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return usageErr("cannot find this executable (%v): give --binary PATH of a moonmq build", err)
		}
		*binary = exe
	}
	if abs, err := filepath.Abs(*binary); err == nil {
		*binary = abs
	}
	if st, err := os.Stat(*binary); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return usageErr("--binary %s is not an executable file: give the path of a moonmq build (go build ./cmd/moonmq)", *binary)
	}
	if *report == "" {
		*report = fmt.Sprintf("chaos-report-%d.html", *seed)
	}
	if err := writable(filepath.Dir(*report)); err != nil {
		return usageErr("--report %s: cannot write there (%v); give a FILE in a writable directory", *report, err)
	}
	dir, err := os.MkdirTemp("", "moonmq-chaos-")
	if err != nil {
		fmt.Fprintf(stderr, "moonmq chaos: no temporary directory for the replicas' data (%v); set TMPDIR to a writable directory\n", err)
		return 2
	}
	h, err := testcluster.NewStandalone(dir, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "moonmq chaos: %v\n", err)
		return 2
	}

	replay := fmt.Sprintf("moonmq chaos --seed %d --duration %v --replicas %d --faults %s", *seed, *duration, *replicas, chaos.KindList(kinds))
	if *groups > 1 {
		replay += fmt.Sprintf(" --groups %d", *groups)
	}
	if *rate != 100 {
		replay += fmt.Sprintf(" --rate %d", *rate)
	}
	for _, kv := range server.raw {
		replay += " --server " + kv
	}
	shape := fmt.Sprintf("%d replicas", *replicas)
	if *groups > 1 {
		shape = fmt.Sprintf("%d groups of %d replicas", *groups, *replicas)
	}
	fmt.Fprintf(stdout, "moonmq chaos: seed %d, %s of %s, fault phase %v, faults %s, report %s\n",
		*seed, shape, *binary, *duration, chaos.KindList(kinds), *report)
	fmt.Fprintf(stdout, "moonmq chaos: replicas' data in %s (%s); Ctrl-C ends the fault phase early\n", dir,
		map[bool]string{true: "kept, --keep", false: "removed at the end; --keep keeps it"}[*keep])

	// The first Ctrl-C (or SIGTERM) ends the fault phase, the second
	// aborts. The brokers run in process groups of their own, so a
	// terminal's Ctrl-C reaches only this process.
	stop, abort, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(finished)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
		case <-finished:
			return
		}
		fmt.Fprintln(stderr, "moonmq chaos: interrupted: the fault phase ends after the current fault, then the run heals, drains, checks and reports (Ctrl-C again aborts without a report)")
		close(stop)
		select {
		case <-sigs:
			close(abort)
		case <-finished:
		}
	}()

	cfg := chaos.Config{
		Seed: *seed, Duration: *duration, Replicas: *replicas, Groups: *groups, Kinds: kinds, Rate: *rate,
		ReportPath: *report, Progress: stdout, ProgressEvery: *progress, TolerateKnown: *tolerate,
		Binary: *binary, Stop: stop, Replay: replay,
		Options: append([]testcluster.Option{testcluster.WithOwnProcessGroup()}, server.opts...),
	}
	var res *chaos.Result
	done := make(chan error, 1)
	go func() { done <- h.Do(func() { res = chaos.Run(h, cfg) }) }()
	var runErr error
	select {
	case runErr = <-done:
	case <-abort:
		fmt.Fprintln(stderr, "moonmq chaos: aborted: killing the replicas, no report")
		_ = h.Close(*keep)
		if *keep {
			fmt.Fprintf(stderr, "moonmq chaos: the replicas' data and logs are kept in %s\n", dir)
		}
		return 2
	}

	if runErr != nil {
		// The harness could not run (a replica never started, no leader
		// was elected, ports...): not a finding about the brokers.
		_ = h.Close(true)
		fmt.Fprintf(stderr, "moonmq chaos: the run could not go on: %v\n", runErr)
		fmt.Fprintf(stderr, "moonmq chaos: this is a harness error, not a verdict on the brokers. Check that --binary (%s) is a moonmq build whose `serve` starts, "+
			"and read the replicas' logs, kept in %s (remove it when done).\n", *binary, dir)
		return 2
	}
	if err := h.Close(*keep); err != nil {
		fmt.Fprintf(stderr, "moonmq chaos: removing %s: %v\n", dir, err)
	}
	if *keep {
		fmt.Fprintf(stdout, "moonmq chaos: the replicas' data, configurations and logs are kept in %s\n", dir)
	}
	switch {
	case !res.OK() || h.Failed():
		var what []string
		if n := anomalies(res); n > 0 {
			what = append(what, fmt.Sprintf("%d checker anomalies", n))
		}
		if res.ExtraCount > 0 {
			what = append(what, fmt.Sprintf("%d harness-check anomalies", res.ExtraCount))
		}
		if len(res.Problems) > 0 {
			what = append(what, fmt.Sprintf("%d problems", len(res.Problems)))
		}
		if h.Failed() {
			what = append(what, "errors from the processes (above)")
		}
		fmt.Fprintf(stdout, "moonmq chaos: FAILED, seed %d: %s. The witnesses are in the summary above and in %s; replay the schedule with: %s\n",
			*seed, strings.Join(what, ", "), *report, replay)
		return 1
	case len(res.Known) > 0:
		fmt.Fprintf(stdout, "moonmq chaos: ok but for %d anomalies of known bug %s (tolerated, --tolerate-known); report %s\n", len(res.Known), chaos.FalseTruncation.ID, *report)
		return 0
	}
	fmt.Fprintf(stdout, "moonmq chaos: ok, seed %d: no anomalies; report %s\n", *seed, *report)
	return 0
}

// allKinds names every fault kind, for the usage text.
func allKinds() string {
	var ks []string
	for _, k := range chaos.AllKinds {
		ks = append(ks, string(k))
	}
	for _, k := range chaos.ClusterKinds {
		ks = append(ks, string(k)+" (--groups 2 or 3)")
	}
	return strings.Join(ks, ",")
}

// anomalies counts the checker's anomalies of a run.
func anomalies(res *chaos.Result) int {
	n := 0
	for _, c := range res.Report.Counts {
		n += c
	}
	return n
}

// writable checks that a file can be created in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".moonmq-chaos-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// serverOverrides collects --server KEY=VALUE flags as testcluster options.
type serverOverrides struct {
	raw  []string
	opts []testcluster.Option
}

func (o *serverOverrides) String() string { return strings.Join(o.raw, " ") }

func (o *serverOverrides) Set(kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	if !ok || key == "" {
		return fmt.Errorf("%q: want KEY=VALUE, e.g. TransactionalIdExpirationMs=5000", kv)
	}
	var v any
	if err := json.Unmarshal([]byte(val), &v); err != nil {
		return fmt.Errorf("%q: VALUE must be JSON (a number, true/false, or a quoted string): %v", kv, err)
	}
	o.raw = append(o.raw, kv)
	o.opts = append(o.opts, testcluster.WithServer(key, v))
	return nil
}
