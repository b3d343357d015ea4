package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/checker"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// Config describes one run.
type Config struct {
	// Seed fixes the fault schedule and every random choice the harness
	// makes (not the timing of the processes).
	Seed int64
	// Duration is the length of the fault phase (default 60 s): the
	// schedule runs one step of every kind, then random ones until
	// Duration, and every step runs even if those before it overran.
	// Setup, healing, the final drain and the checks come on top.
	Duration time.Duration
	// Replicas is the group size, 3 or 5 (default 3).
	Replicas int
	// Groups is the number of replication groups (default 1); more than
	// one runs a cluster of groups (cluster mode), whose partitions are
	// spread over them, and each step hits one group.
	Groups int
	// Kinds are the faults to inject (default AllKinds).
	Kinds []Kind
	// Steps, if set, replaces the generated schedule.
	Steps []Step
	// Plan shapes the generated schedule.
	Plan PlanOptions
	// Partitions of the data topic (default 3); the transactional topic
	// has 2.
	Partitions int
	// Producers is the number of acks=all idempotent producers (default 3)
	// and Rate the records per second each sends (default 100).
	Producers, Rate int
	// NoTxn leaves out the transactional producer.
	NoTxn bool
	// LossyShare is the share of process starts that run in the lossy
	// storage mode, where a SIGKILL is a power loss (default 0.5; negative
	// for none).
	LossyShare float64
	// ForceEnv, if set, is the vfs.LoseUnsyncedEnv value of every start
	// (the tests of the harness itself use the broken-fsync build).
	ForceEnv string
	// SettleWithin bounds the waits after healing (default 120 s): for
	// the producers' last answers (at most 45 s) and for every group to
	// converge. A run that expects a group never to serve again (a
	// broken build) shortens it.
	SettleWithin time.Duration
	// SegmentBytes is the brokers' segment size (default 256 KiB, so that
	// segments roll and older ones can be corrupted).
	SegmentBytes int
	// ReportPath, if set, is where the HTML report is written.
	ReportPath string
	// Progress receives the one-line progress prints (default: the test
	// log); ProgressEvery is their interval (default 10 s).
	Progress      io.Writer
	ProgressEvery time.Duration
	// Binary runs this moonmq binary instead of building one.
	Binary string
	// TolerateKnown reports the anomalies of known, unfixed broker bugs
	// (KnownBug, by their exact signature) apart instead of failing the
	// run on them.
	TolerateKnown bool
	// Options are added to the cluster's options (after the harness's).
	Options []testcluster.Option
	// Stop, when closed, ends the fault phase early: the fault running
	// then completes, the rest of the schedule is left out, and the run
	// heals, drains and checks as after a full fault phase (Ctrl-C in
	// `moonmq chaos`).
	Stop <-chan struct{}
	// Replay is the command line that replays the run, for the summary
	// and the report (default: the go test command of test/chaos).
	Replay string
}

// Result is what a run did and found.
type Result struct {
	Config Config
	// Steps is the schedule; Events what was injected.
	Steps  []Step
	Events []Event
	// History is every operation and the final dumps; Report the checker's
	// verdict on it.
	History checker.History
	Report  checker.Report
	// Failovers are the leader changes the monitor saw.
	Failovers []Failover
	// Extra are the harness's own anomalies (RewrittenRead,
	// EpochRegression, TwoOwnersOneEpoch), and
	// ExtraCount how many there were in all.
	Extra      []checker.Anomaly
	ExtraCount int
	// Problems are failures of the run itself that are not history
	// anomalies (the group never converged after healing, a dump could
	// not be read). They fail a run as anomalies do.
	Problems []string
	// Errors counts the errors clients saw, by kind.
	Errors map[string]int
	// DataLoss lists every data-loss notice a consumer got from its
	// client (a rewind after an OffsetForLeaderEpoch answer), in full;
	// FalseDataLoss those the final logs show to be false.
	DataLoss, FalseDataLoss []string
	// Known are the anomalies of known bugs, set apart from Report by
	// Config.TolerateKnown.
	Known []checker.Anomaly
	// Took is the wall time of the whole run; FaultPhase that of the
	// fault phase.
	Took, FaultPhase time.Duration
	// Interrupted is set when Config.Stop ended the fault phase early;
	// StepsRun is how many steps of the schedule ran.
	Interrupted bool
	StepsRun    int
	// samples are the monitor's observations (leader timeline).
	samples []sample
}

// OK reports whether the run found nothing wrong.
func (r *Result) OK() bool { return r.Report.OK() && r.ExtraCount == 0 && len(r.Problems) == 0 }

// Summary is a few lines for a test log: the seed and how to replay it,
// the counts, and on failure the problems and the checker's witnesses.
func (r *Result) Summary() string { return r.summary(true) }

// summary is Summary, with the checker's witnesses only if detail.
func (r *Result) summary(detail bool) string {
	var b strings.Builder
	acked, unknown, txc, txa := 0, 0, 0, 0
	for _, s := range r.History.Sends {
		if s.Outcome == checker.Acked {
			acked++
		} else {
			unknown++
		}
		if s.Txn != "" {
			switch s.TxnOutcome {
			case checker.TxnCommitted:
				txc++
			case checker.TxnAborted:
				txa++
			}
		}
	}
	kinds := map[Kind]int{}
	for _, e := range r.Events {
		kinds[e.Kind]++
	}
	var ks []string
	for _, k := range everyKind() {
		if kinds[k] > 0 {
			ks = append(ks, fmt.Sprintf("%s=%d", k, kinds[k]))
		}
	}
	fmt.Fprintf(&b, "chaos seed %d: %s, fault phase %v, run %v\n", r.Config.Seed, r.Config.shape(),
		r.FaultPhase.Round(time.Second), r.Took.Round(time.Second))
	if r.Interrupted {
		fmt.Fprintf(&b, "interrupted: the fault phase ended after %d of %d planned steps\n", r.StepsRun, len(r.Steps))
	}
	fmt.Fprintf(&b, "faults: %s\n", strings.Join(ks, " "))
	fmt.Fprintf(&b, "sends: %d acknowledged, %d unknown (transactional records: %d committed, %d aborted); polls: %d; commits: %d; offset fetches: %d; failovers: %d\n",
		acked, unknown, txc, txa, len(r.History.Polls), len(r.History.Commits), len(r.History.OffsetFetches), len(r.Failovers))
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM: %s\n", p)
	}
	for i, d := range r.DataLoss {
		if !detail {
			fmt.Fprintf(&b, "consumer data-loss notices: %d (listed below)\n", len(r.DataLoss))
			break
		}
		if i == 10 {
			fmt.Fprintf(&b, "(%d more data-loss notices)\n", len(r.DataLoss)-i)
			break
		}
		fmt.Fprintf(&b, "consumer data-loss notice: %s\n", d)
	}
	if len(r.FalseDataLoss) > 0 {
		fmt.Fprintf(&b, "%d of %d data-loss notices were false (every record they called lost is in the final log, same value and epoch)\n",
			len(r.FalseDataLoss), len(r.DataLoss))
	}
	if len(r.Known) > 0 {
		fmt.Fprintf(&b, "KNOWN BUG %s (tolerated, not fixed): %d anomalies: %s\n", FalseTruncation.ID, len(r.Known), FalseTruncation.Summary)
	}
	if !detail {
		if r.Report.OK() {
			b.WriteString("checker: no anomalies\n")
		} else {
			b.WriteString("checker: anomalies:")
			for _, k := range checker.Kinds {
				if n := r.Report.Counts[k]; n > 0 {
					fmt.Fprintf(&b, " %s=%d", k, n)
				}
			}
			b.WriteString(" (witnesses below)\n")
		}
	} else {
		b.WriteString(r.Report.String())
		b.WriteByte('\n')
	}
	if r.ExtraCount > 0 {
		fmt.Fprintf(&b, "harness checks (%s, %s, %s): %d\n", RewrittenRead, EpochRegression, TwoOwnersOneEpoch, r.ExtraCount)
		for i, a := range r.Extra {
			if i == 5 || !detail {
				break
			}
			fmt.Fprintf(&b, "- %s %s/%d offset=%d value=%q\n", a.Kind, a.Topic, a.Partition, a.Offset, a.Value)
			for _, w := range a.Witness {
				fmt.Fprintf(&b, "    %s\n", w)
			}
		}
	}
	fmt.Fprintf(&b, "replay: %s\n", r.ReplayCommand())
	return b.String()
}

// ReplayCommand is the command line that replays the run's fault schedule:
// Config.Replay, or the go test command of test/chaos.
func (r *Result) ReplayCommand() string {
	if r.Config.Replay != "" {
		return r.Config.Replay
	}
	cmd := fmt.Sprintf("go test ./test/chaos -run 'TestChaos$' -chaos.seed=%d -chaos.duration=%v -chaos.faults=%s",
		r.Config.Seed, r.Config.Duration, kindList(r.Config.Kinds))
	if r.Config.Replicas != 3 {
		// The schedule depends on the group size.
		cmd += fmt.Sprintf(" -chaos.replicas=%d", r.Config.Replicas)
	}
	if r.Config.Groups > 1 {
		cmd += fmt.Sprintf(" -chaos.groups=%d", r.Config.Groups)
	}
	return cmd
}

// shape says what the run's cluster is: "3 replicas", "2 groups of 3
// replicas".
func (c Config) shape() string {
	if c.Groups > 1 {
		return fmt.Sprintf("%d groups of %d replicas", c.Groups, c.Replicas)
	}
	return fmt.Sprintf("%d replicas", c.Replicas)
}

// KindList is the --faults (-chaos.faults) value that names kinds: "all"
// for every kind, else the comma-separated list.
func KindList(ks []Kind) string { return kindList(ks) }

func kindList(ks []Kind) string {
	if len(ks) == 0 || slices.Equal(ks, AllKinds) || slices.Equal(ks, everyKind()) {
		return "all"
	}
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}

// lossyWarning is the start of what a broker logs when it runs in the
// lossy storage mode (internal/app).
const lossyWarning = "TEST MODE: unsynced writes are kept in process memory"

const (
	dataTopic = "chaos"
	txnTopic  = "chaos-txn"
	groupName = "chaos-group"
	// txnID is the transactional producer's id.
	txnID = "chaos-txn"
)

// Run starts a group of broker processes behind proxies, runs the workload
// through the fault schedule, heals everything, drains, stops the
// processes, dumps their logs and checks the history. It fails t only for
// a broken harness (a process that cannot start); the caller judges the
// Result. t is a *testing.T in tests and a testcluster.Standalone in
// `moonmq chaos`.
func Run(t testcluster.Harness, cfg Config) *Result {
	t.Helper()
	if cfg.Duration <= 0 {
		cfg.Duration = 60 * time.Second
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Groups <= 0 {
		cfg.Groups = 1
	}
	if cfg.SettleWithin <= 0 {
		cfg.SettleWithin = 120 * time.Second
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = everyKind()
	}
	if cfg.Groups == 1 {
		// One group has no metadata log and no links between groups.
		kinds := slices.DeleteFunc(slices.Clone(cfg.Kinds), func(k Kind) bool { return slices.Contains(ClusterKinds, k) })
		if len(kinds) == 0 && cfg.Steps == nil {
			t.Fatalf("chaos: fault kinds %v need a cluster of groups (Groups > 1)", cfg.Kinds)
		}
		cfg.Kinds = kinds
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 3
	}
	if cfg.Producers <= 0 {
		cfg.Producers = 3
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 100
	}
	if cfg.LossyShare == 0 {
		cfg.LossyShare = 0.5
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 256 << 10
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	logf := t.Logf
	if cfg.Progress != nil {
		w := cfg.Progress
		var mu sync.Mutex
		logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, format+"\n", args...)
		}
	}
	res := &Result{Config: cfg}
	steps := cfg.Steps
	if steps == nil {
		opt := cfg.Plan
		opt.Kinds = cfg.Kinds
		opt.Groups = cfg.Groups
		steps = Plan(cfg.Seed, cfg.Duration, cfg.Replicas, opt)
	}
	res.Steps = steps
	began := time.Now()
	logf("chaos: seed %d, %s, fault phase %v, %d planned steps", cfg.Seed, cfg.shape(), cfg.Duration, len(steps))

	// Replica ids run 1..Replicas in g1, on from there in g2, ...; the
	// metadata log's voters are testcluster's.
	var groupIDs [][]int
	groupOf := map[int]int{}
	for g := range cfg.Groups {
		var ids []int
		for i := 1; i <= cfg.Replicas; i++ {
			id := g*cfg.Replicas + i
			ids = append(ids, id)
			groupOf[id] = g
		}
		groupIDs = append(groupIDs, ids)
	}
	var voters []int
	if cfg.Groups > 1 {
		voters = testcluster.MetadataVoters(cfg.Replicas)
	}
	nt, err := NewClusterNet(groupIDs, voters)
	if err != nil {
		t.Fatalf("chaos: proxies: %v", err)
	}
	// Registered before the cluster's cleanup, so it runs after it.
	t.Cleanup(nt.Close)
	inj := newInjector(cfg.Seed)
	inj.net, inj.logf, inj.forceEnv = nt, logf, cfg.ForceEnv
	inj.lossyP = max(cfg.LossyShare, 0)
	inj.replicas, inj.groupOf, inj.voters = cfg.Replicas, groupOf, voters
	inj.topics = []string{dataTopic, txnTopic}
	opts := []testcluster.Option{
		testcluster.WithReplicas(cfg.Replicas),
		testcluster.WithGroups(cfg.Groups),
		testcluster.WithAddressMapper(nt.Mapper()),
		testcluster.WithEnv(inj.env),
		testcluster.WithServer("SegmentBytes", cfg.SegmentBytes),
		testcluster.WithLogTail(60),
	}
	var topicConfigs map[string]*string
	if slices.ContainsFunc(steps, func(s Step) bool { return s.Kind == DiskFull || s.Kind == DiskStall || s.Kind == FsyncEIO }) {
		inj.diskDir = t.TempDir()
	}
	if slices.ContainsFunc(steps, func(s Step) bool { return s.Kind == ClockStep }) {
		inj.clockDir = t.TempDir()
		limit := clockStepLimit(steps, cfg.Replicas)
		opts = append(opts, clockStepTimers(limit)...)
		topicConfigs = map[string]*string{"retention.ms": kadm.StringPtr(fmt.Sprint(limit.Milliseconds()))}
	}
	if cfg.Binary != "" {
		opts = append(opts, testcluster.WithBinary(cfg.Binary))
	}
	c := testcluster.New(t, append(opts, cfg.Options...)...)
	inj.c = c
	nt.Attach(c)
	for _, r := range c.Replicas {
		inj.decide(r.ID)
	}
	c.StartAll()
	for g := range cfg.Groups {
		c.WaitFor(90*time.Second, fmt.Sprintf("a serving leader in g%d", g+1), func() (bool, string) {
			l, _ := c.ServingLeaderOf(g)
			return l != nil, ""
		})
	}

	adm, err := kgo.NewClient(kgo.SeedBrokers(nt.ClientAddrs()...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatalf("chaos: admin client: %v", err)
	}
	defer adm.Close()
	admin := kadm.NewClient(adm)
	topics := map[string]int32{dataTopic: int32(cfg.Partitions), txnTopic: 2}
	for _, name := range []string{dataTopic, txnTopic} {
		if err := createTopic(admin, name, topics[name], cfg.Replicas, topicConfigs); err != nil {
			t.Fatalf("chaos: create topic %s: %v", name, err)
		}
	}
	// Which group owns each partition (read again after the faults if
	// partitions moved); in a run of one group, g1 owns them all.
	owner, err := owners(admin, topics, groupOf)
	if err != nil {
		t.Fatalf("chaos: %v", err)
	}
	if cfg.Groups > 1 {
		logf("chaos: partitions by group: %s", describeOwners(owner))
	}
	if inj.clockDir != "" {
		if err := leaveIdleState(admin, nt.ClientAddrs(), cfg.Replicas, clockStepLimit(steps, cfg.Replicas)); err != nil {
			res.Problems = append(res.Problems, "could not leave the idle state a clock step must not expire: "+err.Error())
		}
	}

	t0 := time.Now()
	inj.t0 = t0
	rec := newRecorder(t0)
	w := &workload{cfg: &cfg, seeds: nt.ClientAddrs(), rec: rec, data: dataTopic, txn: txnTopic,
		dataParts: int32(cfg.Partitions), txnParts: 2, group: groupName, logf: logf}
	if err := w.start(cfg.Seed); err != nil {
		t.Fatalf("chaos: workload: %v", err)
	}
	defer w.stop()
	// Faults start once records flow, so the first one hits a working
	// group.
	if err := testcluster.Poll(60*time.Second, func() (bool, string) {
		a, _, _, _ := rec.counts()
		return a >= 20, fmt.Sprintf("%d acknowledged, errors %v", a, rec.errCounts())
	}); err != nil {
		res.Problems = append(res.Problems, "the workload never got going: "+err.Error())
	}

	mon := newMonitor(c, t0, cfg.Groups, slices.Collect(maps.Keys(topics)))
	phaseStart := time.Now()
	go mon.run(cfg.ProgressEvery, func(latest []sample) {
		acked, unknown, pending, polled := rec.counts()
		now := inj.current()
		if now == "" {
			now = "-"
		}
		var leaders []string
		for _, s := range latest {
			l := fmt.Sprintf("leader=%d epoch=%d", s.Leader, s.Epoch)
			if cfg.Groups > 1 {
				l = fmt.Sprintf("g%d:%d@%d", s.Group+1, s.Leader, s.Epoch)
			}
			leaders = append(leaders, l)
		}
		logf("chaos: %5.0fs/%v faults=%d now=%s acked=%d unknown=%d in-flight=%d polled=%d %s",
			time.Since(phaseStart).Seconds(), cfg.Duration, len(inj.eventsCopy()), now, acked, unknown, pending, polled, strings.Join(leaders, " "))
	})
	res.StepsRun = inj.run(steps, cfg.Stop)
	res.Interrupted = res.StepsRun < len(steps)
	res.FaultPhase = time.Since(phaseStart)
	inj.healAll()
	// Some writes after the last fault, on a whole group.
	time.Sleep(3 * time.Second)
	w.stopProducing(min(45*time.Second, cfg.SettleWithin))

	if slices.ContainsFunc(steps, func(s Step) bool { return s.Kind == Move }) {
		// Partitions moved: judge each by the group owning it now.
		if now, err := owners(admin, topics, groupOf); err != nil {
			res.Problems = append(res.Problems, err.Error())
		} else {
			owner = now
			logf("chaos: partitions by group after the moves: %s", describeOwners(owner))
		}
	}
	leaders, hw, why := converge(c, admin, topics, owner, cfg.Groups, inj.isBroken, cfg.SettleWithin)
	if leaders == nil {
		res.Problems = append(res.Problems, fmt.Sprintf("the cluster did not converge within %v after healing: %s", cfg.SettleWithin, why))
	}
	drain(w, admin, topics, hw, logf)
	w.stop()
	mon.close()

	// Clean stops: a stored log is read with every process down.
	var wg sync.WaitGroup
	for _, r := range c.Replicas {
		if r.Running() {
			wg.Add(1)
			go func() { defer wg.Done(); stopQuietly(r) }()
		}
	}
	wg.Wait()
	// The brokers must have switched to the lossy mode exactly when told
	// to, or a "power loss" was only a kill.
	for _, r := range c.Replicas {
		inj.mu.Lock()
		want := inj.lossyStarts[r.ID]
		inj.mu.Unlock()
		if got := strings.Count(r.Log(), lossyWarning); got != want {
			res.Problems = append(res.Problems, fmt.Sprintf("replica %d logged the lossy-mode warning %d times for %d lossy starts", r.ID, got, want))
		}
	}
	if inj.clockDir != "" {
		res.Problems = append(res.Problems, earlyExpiries(c)...)
	}
	h := rec.history()
	var dumpEpochs [][]int32
	// A group's brokers hold empty copies of the partitions other groups
	// own: only the owner's copies are judged.
	offsets := offsetsPartitions(admin, []string{w.group, w.group848()}, cfg.Groups, groupOf)
	for _, r := range c.Replicas {
		isLeader := leaders != nil && r == leaders[r.Group]
		ds, eps, probs := dumpReplica(r, topics, func(topic string, p int32) bool {
			return owner[fmt.Sprintf("%s/%d", topic, p)] == r.Group
		}, hw, isLeader)
		h.Dumps = append(h.Dumps, ds...)
		dumpEpochs = append(dumpEpochs, eps...)
		res.Problems = append(res.Problems, probs...)
		for _, o := range offsets {
			if !isLeader || r.Group != o.group {
				continue
			}
			logged, err := dumpOffsetCommits(r, o.partition)
			if err != nil {
				res.Problems = append(res.Problems, fmt.Sprintf("replica %d: read __consumer_offsets/%d: %v", r.ID, o.partition, err))
			}
			h.OffsetsLog = append(h.OffsetsLog, logged...)
		}
	}
	res.History = h
	res.Report = checker.Check(h, checker.Options{MinISR: cfg.Replicas/2 + 1, MaxPerKind: -1})
	res.Extra, res.ExtraCount = checkEpochs(h, rec.epochsCopy(), dumpEpochs, 1000)
	falls := checkEpochOrder(h, dumpEpochs)
	res.Extra, res.ExtraCount = append(res.Extra, falls...), res.ExtraCount+len(falls)
	twice := checkOwnersPerEpoch(mon.claimsCopy())
	res.Extra, res.ExtraCount = append(res.Extra, twice...), res.ExtraCount+len(twice)
	notices := rec.dataLossCopy()
	falseOnes := falseNotices(h, rec.epochsCopy(), dumpEpochs, notices)
	for _, n := range notices {
		res.DataLoss = append(res.DataLoss, n.Text)
	}
	for _, n := range falseOnes {
		res.FalseDataLoss = append(res.FalseDataLoss, n.Text)
	}
	if cfg.TolerateKnown {
		res.Report, res.Known = splitKnown(res.Report, falseOnes)
	}
	res.Events = inj.eventsCopy()
	inj.mu.Lock()
	res.Problems = append(res.Problems, inj.problems...)
	inj.mu.Unlock()
	res.samples = mon.samplesCopy()
	res.Failovers = failovers(res.samples, res.Events)
	res.Errors = rec.errCounts()
	res.Took = time.Since(began)
	if cfg.ReportPath != "" {
		// The brokers' logs beside the report, for the witnesses' context.
		dir := cfg.ReportPath + ".logs"
		if err := os.MkdirAll(dir, 0o755); err == nil {
			for _, r := range c.Replicas {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("replica-%d.log", r.ID)), []byte(r.Log()), 0o644)
			}
		}
		if err := os.WriteFile(cfg.ReportPath, []byte(RenderHTML(res)), 0o644); err != nil {
			res.Problems = append(res.Problems, "write report: "+err.Error())
		} else {
			logf("chaos: report written to %s", cfg.ReportPath)
		}
	}
	logf("%s", res.Summary())
	return res
}

// stopQuietly stops a replica cleanly; a paused one is resumed by Stop.
func stopQuietly(r *testcluster.Replica) {
	r.Stop(60 * time.Second)
}

func createTopic(adm *kadm.Client, name string, partitions int32, rf int, configs map[string]*string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		resp, err := adm.CreateTopic(ctx, partitions, int16(rf), configs, name)
		if err == nil {
			err = resp.Err
		}
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// converge waits until every group has a serving leader with every
// replica of the group in its ISR, and every follower's durable position
// equals the high watermark on every partition of topics its group owns
// (owner, by "topic/partition"), twice in a row a second apart. It
// returns each group's leader (by group index) and the high watermarks
// (by "topic/partition"), or nil and why not.
// Replicas that could not start again (broken) are left out.
func converge(c *testcluster.Cluster, adm *kadm.Client, topics map[string]int32, owner map[string]int, groups int, broken func(int) bool, within time.Duration) ([]*testcluster.Replica, map[string]int64, string) {
	var leaders []*testcluster.Replica
	var hw map[string]int64
	var prev string
	stable := 0
	err := testcluster.Poll(within, func() (bool, string) {
		ls := make([]*testcluster.Replica, groups)
		sts := make([]status.Replication, groups)
		sig := ""
		for g := range groups {
			whole := 0
			for _, r := range c.InGroup(g) {
				if !broken(r.ID) {
					whole++
				}
			}
			l, st := c.ServingLeaderOf(g)
			if l == nil {
				stable = 0
				return false, fmt.Sprintf("no serving leader in g%d", g+1)
			}
			if len(st.ISR) != whole {
				stable = 0
				return false, fmt.Sprintf("g%d: leader %d, ISR %v", g+1, l.ID, st.ISR)
			}
			ls[g], sts[g] = l, st
			sig += fmt.Sprint(l.ID, "@", st.Epoch, " ")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ends, err := adm.ListEndOffsets(ctx, dataTopic, txnTopic)
		cancel()
		if err != nil {
			stable = 0
			return false, fmt.Sprintf("list end offsets: %v", err)
		}
		cur := map[string]int64{}
		var errs []string
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				errs = append(errs, fmt.Sprintf("%s/%d: %v", o.Topic, o.Partition, o.Err))
				return
			}
			cur[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		})
		if len(errs) > 0 {
			stable = 0
			return false, "list end offsets: " + strings.Join(errs, "; ")
		}
		for t, n := range topics {
			for p := range n {
				key := fmt.Sprintf("%s/%d", t, p)
				g := owner[key]
				want := cur[key]
				for id, fp := range sts[g].Followers {
					if n, err := strconv.Atoi(id); err == nil && broken(n) {
						continue
					}
					if got, ok := fp.Partitions[fmt.Sprintf("%s-%d", t, p)]; !ok || got != want {
						stable = 0
						return false, fmt.Sprintf("follower %s at %d on %s, g%d leader %d's high watermark %d", id, got, key, g+1, ls[g].ID, want)
					}
				}
			}
		}
		sig += sortedMap(cur)
		if sig != prev {
			prev, stable = sig, 0
		}
		stable++
		if stable < 3 {
			time.Sleep(500 * time.Millisecond)
			return false, "settling"
		}
		leaders, hw = ls, cur
		return true, ""
	})
	if err != nil {
		return nil, hw, err.Error()
	}
	return leaders, hw, ""
}

// owners returns the group (0 for g1) owning each partition of topics, by
// "topic/partition", from the Metadata answer: a partition's replicas are
// its owning group's brokers.
func owners(adm *kadm.Client, topics map[string]int32, groupOf map[int]int) (map[string]int, error) {
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	out := map[string]int{}
	err := testcluster.Poll(60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		md, err := adm.ListTopics(ctx, names...)
		cancel()
		if err != nil {
			return false, err.Error()
		}
		for t, n := range topics {
			d, ok := md[t]
			if !ok || d.Err != nil || len(d.Partitions) != int(n) {
				return false, fmt.Sprintf("topic %s not yet listed whole", t)
			}
			for p, pd := range d.Partitions {
				if len(pd.Replicas) == 0 {
					return false, fmt.Sprintf("%s/%d has no replicas yet", t, p)
				}
				out[fmt.Sprintf("%s/%d", t, p)] = groupOf[int(pd.Replicas[0])]
			}
		}
		return true, ""
	})
	if err != nil {
		return nil, fmt.Errorf("the owners of the workload's partitions: %w", err)
	}
	return out, nil
}

// describeOwners lists the partitions by owning group, for the log.
func describeOwners(owner map[string]int) string {
	by := map[int][]string{}
	for k, g := range owner {
		by[g] = append(by[g], k)
	}
	var out []string
	for g := range len(by) + 1 {
		if ps := by[g]; len(ps) > 0 {
			sort.Strings(ps)
			out = append(out, fmt.Sprintf("g%d: %s", g+1, strings.Join(ps, " ")))
		}
	}
	return strings.Join(out, "; ")
}

// offsetsLocation is the __consumer_offsets partition holding a consumer
// group's commits and the replication group owning it.
type offsetsLocation struct {
	partition int32
	group     int
}

// offsetsPartitions finds where the workload's consumer groups commit: in
// a run of one group, partition 0 in g1; in a cluster, the partitions
// their ids hash to, each owned by the group Metadata names (none if
// Metadata cannot be read: the check of refused commits then has no log
// to judge).
func offsetsPartitions(adm *kadm.Client, consumerGroups []string, groups int, groupOf map[int]int) []offsetsLocation {
	if groups <= 1 {
		return []offsetsLocation{{}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := adm.ListTopics(ctx, "__consumer_offsets")
	if err != nil {
		return nil
	}
	d := md["__consumer_offsets"]
	if len(d.Partitions) == 0 {
		return nil
	}
	var out []offsetsLocation
	for _, cg := range consumerGroups {
		loc := offsetsLocation{partition: coordinator.PartitionFor(cg, len(d.Partitions))}
		if pd, ok := d.Partitions[loc.partition]; ok && len(pd.Replicas) > 0 {
			loc.group = groupOf[int(pd.Replicas[0])]
		}
		if !slices.Contains(out, loc) {
			out = append(out, loc)
		}
	}
	return out
}

func sortedMap(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return b.String()
}

// drain reads every partition from the start, under both isolation
// levels, until each has reached its final high watermark or nothing new
// came for a few seconds; the polls go into the history like any other.
func drain(w *workload, adm *kadm.Client, topics map[string]int32, hw map[string]int64, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, rc := range []bool{false, true} {
		name, iso := "drain-ru", kgo.ReadUncommitted()
		if rc {
			name, iso = "drain-rc", kgo.ReadCommitted()
		}
		cl, err := w.client(kgo.ConsumePartitions(w.allFromZero()), kgo.FetchIsolationLevel(iso),
			kgo.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			logf("chaos: drain client: %v", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			next := map[string]int64{}
			lastNew := time.Now()
			deadline := time.Now().Add(90 * time.Second)
			for time.Now().Before(deadline) && time.Since(lastNew) < 5*time.Second {
				done := hw != nil
				for k, e := range hw {
					if next[k] < e {
						done = false
					}
				}
				if done {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				start := w.rec.now()
				fs := cl.PollFetches(ctx)
				cancel()
				end := w.rec.now()
				fs.EachPartition(func(p kgo.FetchTopicPartition) {
					if len(p.Records) == 0 {
						return
					}
					lastNew = time.Now()
					w.rec.pollFromFetch(p, name, checker.Assign, rc, start, end)
					next[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = p.Records[len(p.Records)-1].Offset + 1
				})
			}
		}()
	}
	wg.Wait()
}
