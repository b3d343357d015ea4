package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/flowcheck"
	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// Config is one run.
type Config struct {
	// Seed fixes the fault schedule and the feeder's lines (not the
	// processes' timing).
	Seed uint64
	// Duration is the fault phase; setup and the final check come on top.
	Duration time.Duration
	// Pods is the number of word-count pods: 2 or more run in
	// ha.mode active-standby, 1 is the single-instance tier.
	Pods int
	// Replicas is the MoonMQ cluster: 1 node, or a 3-replica Raft group.
	Replicas int
	// Faults are the kinds to inject (every kind that applies when nil).
	Faults []Kind
	// CheckEvery is how many faults run between exactly-once checks.
	CheckEvery int
	// Rate is the lines per second the feeder produces.
	Rate int
	// Report is the HTML report's path ("" for none); the JSON summary
	// goes beside it, with the extension .json.
	Report string
	// Dir is the run directory (every process's data and log); a new
	// temporary directory when "". It is removed after a run without
	// anomalies unless Keep.
	Dir  string
	Keep bool
	// Out receives the progress lines (default os.Stdout).
	Out io.Writer
	// Stop, when closed, ends the fault phase early: the final check
	// still runs.
	Stop <-chan struct{}
}

func (c Config) withDefaults() (Config, error) {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Pods == 0 {
		c.Pods = 3
	}
	if c.Pods < 1 {
		return c, fmt.Errorf("--pods %d: need at least 1", c.Pods)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas != 1 && c.Replicas != 3 {
		return c, fmt.Errorf("--replicas %d: 1 or 3", c.Replicas)
	}
	if c.CheckEvery <= 0 {
		c.CheckEvery = 10
	}
	if c.Rate <= 0 {
		c.Rate = 200
	}
	if c.Faults == nil {
		ks, err := parseKinds("all", c.Pods, c.Replicas)
		if err != nil {
			return c, err
		}
		c.Faults = ks
	}
	for _, k := range c.Faults {
		if why := applicable(k, c.Pods, c.Replicas); why != "" {
			return c, fmt.Errorf("fault %s %s", k, why)
		}
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return c, nil
}

// Replay is the command line that runs the same schedule again.
func (c Config) Replay() string {
	return fmt.Sprintf("go run ./cmd/stoatchaos --seed %d --duration %v --pods %d --replicas %d --faults %s --check-every %d --rate %d",
		c.Seed, c.Duration, c.Pods, c.Replicas, kindList(c.Faults), c.CheckEvery, c.Rate)
}

// Fault is one injected fault.
type Fault struct {
	N      int
	At     time.Duration // since the fault phase began
	Kind   Kind
	Step   string
	Target string
	// From and To are the active before and after.
	From string
	To   string
	// Takeover is the time from the fault (the kill, the SIGSTOP, the
	// accepted switch, the SIGTERM, the crash) to one active seen again.
	// Takeover counts it in the takeover statistics: the fault removed
	// or replaced the active.
	Took     time.Duration
	Takeover bool
	Detail   string
	Anomaly  string
}

// Check is one exactly-once check.
type Check struct {
	AfterFault int
	At         time.Duration
	Final      bool
	Lines      int
	Active     string
	// CatchUp is how long the active's store took to equal the reference
	// once the feeder paused; Took the whole check.
	CatchUp time.Duration
	Took    time.Duration
	Report  flowcheck.Report
	Anomaly string
}

// Result is what a run did and found.
type Result struct {
	Config      Config
	Started     time.Time
	Took        time.Duration
	FaultPhase  time.Duration
	Interrupted bool
	Faults      []Fault
	Checks      []Check
	// Anomalies are what the application got wrong; Harness the failures
	// of the run itself (a broker that would not start, a build).
	Anomalies []string
	Harness   []string
	// Notes are things that look wrong without breaking a guarantee,
	// with the pods' high-availability log lines around them.
	Notes []string
	// Acked and Failed count the feeder's lines.
	Acked, Failed int
	RunDir        string
	// Logs are the tails of the pods' and brokers' logs, kept when the
	// run failed.
	Logs map[string]string
}

// OK reports whether the run found nothing wrong.
func (r *Result) OK() bool { return len(r.Anomalies) == 0 && len(r.Harness) == 0 }

// ExitCode is the command's: 0 no anomaly, 1 anomalies, 2 the harness
// failed.
func (r *Result) ExitCode() int {
	switch {
	case len(r.Anomalies) > 0:
		return 1
	case len(r.Harness) > 0:
		return 2
	}
	return 0
}

// Verdict is the result in a few words.
func (r *Result) Verdict() string {
	switch {
	case len(r.Anomalies) == 1:
		return "FAIL: 1 anomaly"
	case len(r.Anomalies) > 1:
		return fmt.Sprintf("FAIL: %d anomalies", len(r.Anomalies))
	case len(r.Harness) > 0:
		return "ERROR: the run itself failed"
	}
	return "PASS: no anomalies"
}

// runner holds a run's processes.
type runner struct {
	cfg       Config
	tb        *runTB
	res       *Result
	out       io.Writer
	cluster   *testenv.Cluster
	brokerDir string
	bin       string
	app       string
	// pods are the state directories; with active-standby all run, with
	// --pods 1 live is the one running and the other is the spare a
	// pause-active fault starts.
	pods  []*pod
	live  *pod
	feed  *feeder
	begin time.Time // of the fault phase
}

// anomaly is an error that is the application's fault.
type anomaly struct{ msg string }

func (a anomaly) Error() string { return a.msg }

func anomalyf(format string, args ...any) error { return anomaly{fmt.Sprintf(format, args...)} }

// during says when err happened, keeping it an anomaly if it is one.
func during(when string, err error) error {
	var a anomaly
	if errors.As(err, &a) {
		return anomaly{when + ": " + a.msg}
	}
	return fmt.Errorf("%s: %w", when, err)
}

func (r *runner) ha() bool { return r.cfg.Pods > 1 }

// Run runs cfg and returns what it found. It writes the report when
// cfg.Report is set.
func Run(cfg Config) *Result {
	res := &Result{Started: time.Now()}
	cfg, err := cfg.withDefaults()
	res.Config = cfg
	if err != nil {
		res.Harness = append(res.Harness, err.Error())
		return res
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "stoatchaos-"); err != nil {
			res.Harness = append(res.Harness, err.Error())
			return res
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Harness = append(res.Harness, err.Error())
		return res
	}
	res.RunDir = dir
	r := &runner{cfg: cfg, tb: newTB(dir, cfg.Out), res: res, out: cfg.Out, app: fmt.Sprintf("stoatchaos-%d", cfg.Seed)}
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(fatal); ok {
				res.Harness = append(res.Harness, f.msg)
			} else {
				res.Harness = append(res.Harness, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}
		r.end()
	}()
	r.printf("seed %d, %v, %d pods (%s), %d MoonMQ broker(s), faults %s; run directory %s",
		cfg.Seed, cfg.Duration, cfg.Pods, r.tier(), cfg.Replicas, kindList(cfg.Faults), dir)
	if err := r.setup(); err != nil {
		r.fail(during("setup", err))
		return res
	}
	if err := r.faultPhase(); err != nil {
		r.fail(err)
		return res
	}
	if err := r.final(); err != nil {
		r.fail(err)
	}
	return res
}

func (r *runner) tier() string {
	if r.ha() {
		return "active-standby"
	}
	return "single instance"
}

func (r *runner) printf(format string, args ...any) {
	at := ""
	if !r.begin.IsZero() {
		at = fmt.Sprintf(" %4.0fs", time.Since(r.begin).Seconds())
	}
	fmt.Fprintf(r.out, "stoatchaos%s: "+format+"\n", append([]any{at}, args...)...)
}

// fail records err: an anomaly, or a failure of the harness.
func (r *runner) fail(err error) {
	var a anomaly
	if errors.As(err, &a) {
		r.res.Anomalies = append(r.res.Anomalies, a.msg)
	} else {
		r.res.Harness = append(r.res.Harness, err.Error())
	}
	r.printf("STOP: %v", err)
}

// end stops everything, writes the report and removes the run directory
// after a run without anomalies.
func (r *runner) end() {
	res := r.res
	if r.feed != nil {
		r.feed.pause()
		res.Acked, res.Failed = r.feed.counts()
		r.feed.close()
	}
	if !res.OK() {
		res.Logs = map[string]string{}
		for _, p := range r.pods {
			if p.proc != nil {
				res.Logs[fmt.Sprintf("%s run %d (%s)", p.id, p.runs, p.logDir)] = p.tail(40)
			}
		}
		if r.brokerDir != "" {
			for i := 1; i <= r.cfg.Replicas; i++ {
				path := filepath.Join(r.brokerDir, fmt.Sprintf("replica-%d.log", i))
				if b, err := os.ReadFile(path); err == nil {
					lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
					res.Logs[path] = strings.Join(lines[max(0, len(lines)-30):], "\n")
				}
			}
		}
	}
	r.tb.runCleanups()
	res.Took = time.Since(res.Started)
	if !r.begin.IsZero() && res.FaultPhase == 0 {
		res.FaultPhase = time.Since(r.begin)
	}
	if r.cfg.Report != "" {
		if err := writeReport(res, r.cfg.Report); err != nil {
			res.Harness = append(res.Harness, "write the report: "+err.Error())
		} else {
			r.printf("report: %s (and %s)", r.cfg.Report, jsonPath(r.cfg.Report))
		}
	}
	fmt.Fprintln(r.out, res.Summary())
	if res.OK() && !r.cfg.Keep {
		os.RemoveAll(res.RunDir)
	} else {
		r.printf("run directory kept: %s", res.RunDir)
	}
}

func (r *runner) setup() error {
	r.tb.name("broker")
	r.cluster = testenv.MoonMQ(r.tb, r.cfg.Replicas)
	r.brokerDir = r.tb.lastDir()
	r.bin = testenv.BuildBinary(r.tb, "./examples/wordcount")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err := createTopics(ctx, r.cluster.Addrs())
	cancel()
	if err != nil {
		return fmt.Errorf("create the topics: %w", err)
	}
	n := r.cfg.Pods
	if n == 1 {
		n = 2 // the instance and its spare
	}
	for i := range n {
		port, err := freePort()
		if err != nil {
			return err
		}
		p := &pod{r: r, id: fmt.Sprintf("pod-%d", i), port: port}
		r.tb.name(p.id + "-state")
		p.stateDir = r.tb.TempDir()
		r.pods = append(r.pods, p)
	}
	if r.ha() {
		for _, p := range r.pods {
			p.start()
		}
	} else {
		r.live = r.pods[0]
		r.live.start()
	}
	if _, err := r.settle(90 * time.Second); err != nil {
		return err
	}
	f, err := newFeeder(r.cluster.Bootstrap(), r.cfg.Rate, r.cfg.Seed)
	if err != nil {
		return err
	}
	r.feed = f
	f.resume()
	return nil
}

func (r *runner) stopped() bool {
	select {
	case <-r.cfg.Stop:
		return true
	default:
		return false
	}
}

func (r *runner) faultPhase() error {
	r.begin = time.Now()
	next := plan(r.cfg.Seed, r.cfg.Faults)
	for n := 1; time.Since(r.begin) < r.cfg.Duration; n++ {
		if r.stopped() {
			r.res.Interrupted = true
			break
		}
		s := next()
		if err := r.sleep(s.Gap); err != nil {
			return during(fmt.Sprintf("before fault #%d", n), err)
		}
		f, err := r.inject(n, s)
		acked, _ := r.feed.counts()
		if err != nil {
			f.Anomaly = err.Error()
		}
		r.res.Faults = append(r.res.Faults, f)
		took := "-"
		if f.Takeover || f.Took > 0 {
			took = f.Took.Round(time.Millisecond).String()
		}
		r.printf("#%d %-18s %-8s %s -> %s  takeover %s  %s (lines acked %d)", n, f.Kind, f.Target, f.From, f.To, took, f.Detail, acked)
		if err != nil {
			return during(fmt.Sprintf("fault #%d %s", n, s.Kind), err)
		}
		if n%r.cfg.CheckEvery == 0 {
			if err := r.check(n, false); err != nil {
				return during(fmt.Sprintf("the check after fault #%d", n), err)
			}
		}
	}
	r.res.FaultPhase = time.Since(r.begin)
	return nil
}

// sleep waits d, watching for pods that exit by themselves.
func (r *runner) sleep(d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := r.exits(); err != nil {
			return err
		}
		time.Sleep(min(50*time.Millisecond, time.Until(end)))
	}
	return r.exits()
}

// exits reports a pod that ended without the harness ending it.
func (r *runner) exits() error {
	for _, p := range r.pods {
		if p.proc != nil && !p.expectExit && p.proc.Exited() {
			_, err := p.proc.Wait(0)
			p.expectExit = true
			return anomalyf("%s exited by itself (%v); its log ends:\n%s", p.id, err, p.tail(25))
		}
	}
	return nil
}

// note records an observation with the last high-availability log lines
// of the pods involved.
func (r *runner) note(what string, pods ...*pod) {
	var b strings.Builder
	b.WriteString(what)
	for _, p := range pods {
		var lines []string
		for _, l := range strings.Split(p.proc.Log(), "\n") {
			for _, k := range []string{"claim", "promot", "handed", "demoted", `"msg":"active"`, "handoff", "standing down"} {
				if strings.Contains(l, k) {
					lines = append(lines, l)
					break
				}
			}
		}
		fmt.Fprintf(&b, "\n-- %s (run %d, %s):\n%s", p.id, p.runs, p.logDir, strings.Join(lines[max(0, len(lines)-12):], "\n"))
	}
	r.res.Notes = append(r.res.Notes, b.String())
	r.printf("NOTE: %s", what)
}

// running are the pods with a process that runs.
func (r *runner) running() []*pod {
	var out []*pod
	for _, p := range r.pods {
		if p.running() {
			out = append(out, p)
		}
	}
	return out
}

func without(ps []*pod, x *pod) []*pod {
	var out []*pod
	for _, p := range ps {
		if p != x {
			out = append(out, p)
		}
	}
	return out
}

// activeNow returns the one active among ps, or nil and what each said.
func (r *runner) activeNow(ps []*pod) (*pod, string) {
	var act []*pod
	var views []string
	for _, p := range ps {
		if !p.running() {
			views = append(views, p.id+":down")
			continue
		}
		if p.paused {
			views = append(views, p.id+":paused")
			continue
		}
		if !r.ha() {
			if p.ready() {
				act = append(act, p)
				views = append(views, p.id+":ready")
			} else {
				views = append(views, p.id+":not-ready")
			}
			continue
		}
		s, ok := p.status()
		if !ok {
			views = append(views, p.id+":?")
			continue
		}
		views = append(views, fmt.Sprintf("%s:%s/%s holder=%s@%d lag=%d", p.id, s.SelfRole, s.SelfState, s.Holder, s.TokenEpoch, s.Lag))
		if s.active() {
			act = append(act, p)
		}
	}
	if len(act) == 1 {
		return act[0], ""
	}
	return nil, strings.Join(views, " ")
}

// waitActive waits until exactly one of ps says it is the active (with
// --pods 1: is ready) and returns it and the time since from.
func (r *runner) waitActive(ps []*pod, from time.Time, within time.Duration) (*pod, time.Duration, error) {
	deadline := time.Now().Add(within)
	for {
		if err := r.exits(); err != nil {
			return nil, 0, err
		}
		p, views := r.activeNow(ps)
		if p != nil {
			return p, time.Since(from), nil
		}
		if time.Now().After(deadline) {
			return nil, 0, anomalyf("no single active within %v: %s", within, views)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// settle waits until the application is whole again: every pod runs,
// one is the active and every other a caught-up standby
// (READY_STANDBY); with --pods 1, the instance is ready.
func (r *runner) settle(within time.Duration) (*pod, error) {
	deadline := time.Now().Add(within)
	for {
		if err := r.exits(); err != nil {
			return nil, err
		}
		if !r.ha() {
			if r.live.ready() {
				return r.live, nil
			}
		} else {
			var act *pod
			ok := true
			var views []string
			for _, p := range r.pods {
				s, answered := p.status()
				if !answered {
					ok = false
					views = append(views, p.id+":?")
					continue
				}
				views = append(views, fmt.Sprintf("%s:%s/%s lag=%d", p.id, s.SelfRole, s.SelfState, s.Lag))
				switch {
				case s.active() && act == nil:
					act = p
				case s.SelfRole == "STANDBY" && s.SelfState == "READY_STANDBY":
				default:
					ok = false
				}
			}
			if ok && act != nil {
				return act, nil
			}
			if time.Now().After(deadline) {
				return nil, anomalyf("the application did not settle (one active, every other pod a caught-up standby) within %v: %s", within, strings.Join(views, " "))
			}
		}
		if time.Now().After(deadline) {
			return nil, anomalyf("the instance was not ready within %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settleWithin is how long the application may take to be whole again
// after a fault: longer when the brokers fail over too.
func (r *runner) settleWithin() time.Duration {
	if r.cfg.Replicas > 1 {
		return 120 * time.Second
	}
	return 60 * time.Second
}

// check pauses the feeder, waits for the active's store to hold the
// reference counts of everything "words" holds, and checks exactly-once
// from the topics. final also stops every pod before the topic check.
func (r *runner) check(after int, final bool) error {
	start := time.Now()
	r.feed.pause()
	c := Check{AfterFault: after, At: time.Since(r.begin), Final: final}
	err := r.checkInto(&c, final)
	c.Took = time.Since(start)
	if err != nil {
		c.Anomaly = err.Error()
	}
	r.res.Checks = append(r.res.Checks, c)
	what := fmt.Sprintf("check after %d faults", after)
	if final {
		what = "final check"
	}
	r.printf("%s: %d lines; %s; store caught up in %v, check took %v", what, c.Lines, c.Report, c.CatchUp.Round(time.Millisecond), c.Took.Round(time.Millisecond))
	if err != nil {
		return err
	}
	if !final {
		r.feed.resume()
	}
	return nil
}

func (r *runner) checkInto(c *Check, final bool) error {
	act, err := r.settle(r.settleWithin())
	if err != nil {
		return err
	}
	bootstrap := r.cluster.Bootstrap()
	reference := func() (map[string]int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		want, lines, err := flowcheck.Expected(ctx, bootstrap)
		c.Lines = lines
		return want, err
	}
	want, err := reference()
	if err != nil {
		return err
	}
	caught := time.Now()
	deadline := caught.Add(120 * time.Second)
	lastRef := caught
	var got map[string]int64
	for {
		if err := r.exits(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		got, err = flowcheck.ReadStore(ctx, statusClient, act.url(""))
		cancel()
		if err == nil && flowcheck.Equal(got, want) {
			break
		}
		if err != nil {
			// The active may have changed (a failover nobody caused is
			// not an anomaly by itself): look again.
			if p, _ := r.activeNow(r.running()); p != nil {
				act = p
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return anomalyf("the active's store was not readable 120s after the input stopped: %v", err)
			}
			return anomalyf("%s's store 120s after the input stopped is not the input's word count: %s", act.id, flowcheck.Diff(got, want))
		}
		if time.Since(lastRef) > 10*time.Second {
			// A produce whose answer was lost may have landed late.
			if want, err = reference(); err != nil {
				return err
			}
			lastRef = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.CatchUp = time.Since(caught)
	c.Active = act.id
	var stopErr error
	if final {
		// Standbys first, the active last: the topics are then final.
		for _, p := range append(without(r.running(), act), act) {
			if err := p.stop(); err != nil && stopErr == nil {
				stopErr = anomalyf("at the end: %v", err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	rep, err := flowcheck.CheckExactlyOnce(ctx, bootstrap, r.app, want)
	c.Report = rep
	if err != nil {
		return err
	}
	if !rep.OK() {
		return anomalyf("not exactly once: %s", strings.Join(rep.Problems, "; "))
	}
	return stopErr
}

func (r *runner) final() error {
	if err := r.check(len(r.res.Faults), true); err != nil {
		return during("the final check", err)
	}
	return nil
}

// takeoverStats are the median, p99 and max of the takeovers among fs.
func takeoverStats(fs []Fault) (n int, median, p99, worst time.Duration) {
	var d []time.Duration
	for _, f := range fs {
		if f.Takeover && f.Anomaly == "" {
			d = append(d, f.Took)
		}
	}
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	q := func(x float64) time.Duration {
		i := int(x*float64(len(d))+0.999999) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return len(d), q(0.5), q(0.99), d[len(d)-1]
}

// Summary is the run in one line.
func (r *Result) Summary() string {
	byKind := map[Kind]int{}
	for _, f := range r.Faults {
		byKind[f.Kind]++
	}
	var ks []string
	for _, k := range AllKinds {
		if byKind[k] > 0 {
			ks = append(ks, fmt.Sprintf("%s=%d", k, byKind[k]))
		}
	}
	n, med, _, worst := takeoverStats(r.Faults)
	lines := 0
	if len(r.Checks) > 0 {
		lines = r.Checks[len(r.Checks)-1].Lines
	}
	brokers := "1 broker"
	if r.Config.Replicas > 1 {
		brokers = fmt.Sprintf("%d broker replicas", r.Config.Replicas)
	}
	s := fmt.Sprintf("stoatchaos seed %d: %d pods, %s, fault phase %v: %d faults (%s); takeover median %v, max %v over %d takeovers; %d checks, %d lines: %s",
		r.Config.Seed, r.Config.Pods, brokers, r.FaultPhase.Round(time.Second), len(r.Faults), strings.Join(ks, " "),
		med.Round(time.Millisecond), worst.Round(time.Millisecond), n, len(r.Checks), lines, r.Verdict())
	if len(r.Notes) > 0 {
		s += fmt.Sprintf(" (%d notes: see the report)", len(r.Notes))
	}
	if r.Interrupted {
		s += " (interrupted)"
	}
	return s
}

// cutsNetwork reports whether the run has cut-active faults, for which
// every pod dials the brokers through proxies of its own.
func (r *runner) cutsNetwork() bool {
	for _, k := range r.cfg.Faults {
		if k == CutActive {
			return true
		}
	}
	return false
}
