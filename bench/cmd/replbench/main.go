// Command replbench runs `moonmq bench` against a MoonMQ started by itself:
// a single node (--replicas 1) or a replication group in failover mode
// (--replicas 3 or 5: that many `moonmq serve` processes on loopback, as in
// bench/cmd/failoverbench). It is the MoonMQ half of bench/replication.sh.
//
// Cases run one at a time, one `moonmq bench` process per case. replbench
// creates each case's topic itself (replication factor -1, the broker's
// default) and passes --no-create, so that the topic exists on every
// replica before the measured time starts. Before every case it waits until a replica reports itself the
// serving leader on GET /replication/status; after it, it records the
// leader's ISR (a shrunk ISR would make acks=all cheaper and the numbers
// flattering) and the CPU seconds each replica and the load generator used,
// so a reader can tell whether the case was CPU-bound on a small machine.
//
// With --profile-dir it then runs one more, unmeasured, case and saves a CPU
// profile of every replica taken through its metrics port
// (/debug/pprof/profile) while that case produces.
//
// The merged report has the shape of `moonmq bench --json`
// (internal/bench.Report), so benchcompare reads it like any other.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/bench"
	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// token guards the replication port; every request, Raft included, needs it.
const token = "bench-token"

type config struct {
	moonmq   string
	server   string
	replicas int
	groups   int
	// otherFailover: after the measured cases, one group's produce
	// alone and then again while another group's leader is killed.
	otherFailover bool
	name          string
	jsonPath      string
	workDir       string
	duration      time.Duration
	recordSize    int
	acks          []int
	partitions    []int
	modes         []string
	benchArgs     []string
	serverExtra   string
	replExtra     string
	profileDir    string
	profileParts  int
	profileMode   string
	profileSecs   int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "replbench: %v\n", err)
		os.Exit(2)
	}
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "replbench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("replbench", flag.ContinueOnError)
	cfg := &config{}
	var acks, partitions, modes, benchArgs string
	fs.StringVar(&cfg.moonmq, "moonmq", "", "moonmq binary (required): the load generator, and the replicas unless --server")
	fs.StringVar(&cfg.server, "server", "", "moonmq binary the replicas run (default: --moonmq)")
	fs.IntVar(&cfg.replicas, "replicas", 3, "1 = single node; 3 or 5 = replication group in failover mode")
	fs.BoolVar(&cfg.otherFailover, "other-group-failover", false, "with --groups 2 or more: after the measured cases, produce to a topic of group 2 alone, then again while group 1's leader is killed with SIGKILL a third of the way in")
	fs.IntVar(&cfg.groups, "groups", 1, "replication groups of --replicas each; above 1, a cluster (cluster mode, docs/CLUSTER.md) that splits each topic between them")
	fs.StringVar(&cfg.name, "name", "", "label of the target in reports (default moonmq-r<replicas>)")
	fs.StringVar(&cfg.jsonPath, "json", "", "write the merged report here")
	fs.StringVar(&cfg.workDir, "workdir", "", "data, configs and logs (default: a temporary directory, removed at the end)")
	fs.DurationVar(&cfg.duration, "duration", 8*time.Second, "produce time per case")
	fs.IntVar(&cfg.recordSize, "record-size", 1024, "record value size in bytes")
	fs.StringVar(&acks, "acks", "-1", "comma-separated acks values")
	fs.StringVar(&partitions, "partitions", "1,8", "comma-separated partition counts")
	fs.StringVar(&modes, "modes", "pipelined,one-at-a-time", "comma-separated produce modes")
	fs.StringVar(&benchArgs, "bench-args", "", "extra flags for `moonmq bench`, space-separated")
	fs.StringVar(&cfg.serverExtra, "server-extra", "", `extra JSON members of the "Server" config object, e.g. '"Acks":"all"'`)
	fs.StringVar(&cfg.replExtra, "replication-extra", "", `extra JSON members of the "Replication" config object, e.g. '"AckTimeout":2'`)
	fs.StringVar(&cfg.profileDir, "profile-dir", "", "after the measured cases, profile every replica during one extra case and write the profiles here")
	fs.IntVar(&cfg.profileParts, "profile-partitions", 1, "partitions of the profiled case")
	fs.StringVar(&cfg.profileMode, "profile-mode", "pipelined", "mode of the profiled case")
	fs.IntVar(&cfg.profileSecs, "profile-seconds", 8, "CPU profile length; the profiled case produces 2 s longer")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.server == "" {
		cfg.server = cfg.moonmq
	}
	if cfg.moonmq == "" {
		return nil, errors.New("--moonmq is required")
	}
	if cfg.replicas != 1 && cfg.replicas != 3 && cfg.replicas != 5 {
		return nil, errors.New("--replicas must be 1, 3 or 5")
	}
	if cfg.groups < 1 || cfg.groups > 1 && cfg.replicas == 1 {
		return nil, errors.New("--groups must be at least 1, and groups of one replica are not a cluster")
	}
	if cfg.name == "" {
		cfg.name = fmt.Sprintf("moonmq-r%d", cfg.replicas)
		if cfg.groups > 1 {
			cfg.name = fmt.Sprintf("moonmq-%dx%d", cfg.groups, cfg.replicas)
		}
	}
	for _, f := range split(acks) {
		switch f {
		case "all", "-1":
			cfg.acks = append(cfg.acks, -1)
		case "0", "1":
			n, _ := strconv.Atoi(f)
			cfg.acks = append(cfg.acks, n)
		default:
			return nil, fmt.Errorf("invalid acks %q", f)
		}
	}
	for _, f := range split(partitions) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid partition count %q", f)
		}
		cfg.partitions = append(cfg.partitions, n)
	}
	cfg.modes = split(modes)
	cfg.benchArgs = strings.Fields(benchArgs)
	if len(cfg.acks) == 0 || len(cfg.partitions) == 0 || len(cfg.modes) == 0 {
		return nil, errors.New("--acks, --partitions and --modes must not be empty")
	}
	return cfg, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// replica is one `moonmq serve` process.
type replica struct {
	id                             int
	group                          int // 1-based; its name is g<group>
	port, metricsPort, replicaPort int
	dataDir, configPath, logPath   string
	cmd                            *exec.Cmd
	exited                         chan struct{}
}

func (r *replica) clientAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// writeConfigs lays out n replicas under dir. For n == 1 the config is a
// plain single node (no Replication block), exactly what bench/run.sh
// benchmarks; otherwise it is failoverbench's failover-mode block with the
// AckTimeout and IsrLagSeconds defaults left alone (they only matter when a
// follower falls behind, and a benchmark should see the production
// defaults). With pprof the metrics port serves the profiles that
// --profile-dir fetches (the broker serves none by default).
//
// With groups > 1 it lays out groups groups of n, ids counting on from one
// group to the next, each with a Cluster block; the metadata voters are
// three brokers taken in turn from the groups, so that losing one group's
// leader never takes the metadata quorum.
func writeConfigs(dir string, n, groups int, serverExtra, replExtra string, pprof bool) ([]*replica, error) {
	rs := make([]*replica, n*groups)
	for i := range rs {
		r := &replica{id: i + 1, group: i/n + 1}
		for _, p := range []*int{&r.port, &r.metricsPort, &r.replicaPort} {
			var err error
			if *p, err = freeport.Pick(); err != nil {
				return nil, err
			}
		}
		r.dataDir = filepath.Join(dir, fmt.Sprintf("r%d", r.id))
		r.configPath = filepath.Join(dir, fmt.Sprintf("r%d.json", r.id))
		r.logPath = filepath.Join(dir, fmt.Sprintf("r%d.log", r.id))
		if err := os.MkdirAll(r.dataDir, 0o755); err != nil {
			return nil, err
		}
		rs[i] = r
	}
	extra := func(s string) string {
		if s == "" {
			return ""
		}
		return ", " + s
	}
	if pprof {
		serverExtra = strings.TrimPrefix(serverExtra+`, "Metrics": {"Pprof": true}`, ", ")
	}
	var voters []string
	for k := 0; len(voters) < 3 && groups > 1; k++ {
		r := rs[(k%groups)*n+k/groups]
		voters = append(voters, fmt.Sprintf(`{"Id": %d, "Address": "127.0.0.1:%d"}`, r.id, r.replicaPort))
	}
	for _, r := range rs {
		var cfg string
		cluster := ""
		if groups > 1 {
			cluster = fmt.Sprintf(`,
  "Cluster": {"Enabled": true, "Experimental": true, "ClusterId": "replbench", "BrokerId": %d, "GroupId": "g%d",
    "MetadataVoters": [%s]}`, r.id, r.group, strings.Join(voters, ", "))
		}
		if n == 1 {
			cfg = fmt.Sprintf(`{"Server": {"Host": "127.0.0.1", "Port": %d, "MetricsPort": %d, "DataDir": %q%s}}`,
				r.port, r.metricsPort, r.dataDir, extra(serverExtra))
		} else {
			var peers []string
			for _, o := range rs {
				if o != r && o.group == r.group {
					peers = append(peers, fmt.Sprintf(`{"Id": %d, "Address": "127.0.0.1:%d", "ClientAddress": "127.0.0.1:%d"}`, o.id, o.replicaPort, o.port))
				}
			}
			// Replica 1 is the preferred first leader, as in failoverbench;
			// with failover on, any ISR member may lead later.
			role := "follower"
			if (r.id-1)%n == 0 {
				role = "leader"
			}
			cfg = fmt.Sprintf(`{"Server": {"Host": "127.0.0.1", "Port": %d, "MetricsPort": %d, "DataDir": %q%s,
  "Replication": {"Enabled": true, "ReplicaId": %d, "Role": %q, "ReplicateHost": "127.0.0.1",
    "ReplicatePort": %d, "ClientAddress": "127.0.0.1:%d", "Token": %q%s,
    "Peers": [%s], "Failover": {"Enabled": true}}%s}}`,
				r.port, r.metricsPort, r.dataDir, extra(serverExtra), r.id, role, r.replicaPort, r.port, token, extra(replExtra),
				strings.Join(peers, ", "), cluster)
		}
		if err := os.WriteFile(r.configPath, []byte(cfg+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// start runs the replica and waits for its "moonmq serving" log line.
func (r *replica) start(bin string) error {
	lf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	r.cmd = exec.Command(bin, "serve", "--config", r.configPath)
	r.cmd.Stdout = lf
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		lf.Close()
		return err
	}
	if err := r.cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	r.exited = make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer lf.Close()
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			fmt.Fprintln(lf, sc.Text())
			if strings.Contains(sc.Text(), "moonmq serving") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { r.cmd.Wait(); close(r.exited) }()
	select {
	case <-ready:
		return nil
	case <-r.exited:
		return fmt.Errorf("replica %d exited during start-up (log %s)", r.id, r.logPath)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("replica %d did not start within 30s (log %s)", r.id, r.logPath)
	}
}

// stop sends SIGTERM and waits, then SIGKILL after 15 s.
func (r *replica) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
}

// cpuSeconds is the user+system CPU time the process has used so far, from
// /proc/<pid>/stat (Linux); 0 where that is unavailable.
func (r *replica) cpuSeconds() float64 {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	// USER_HZ is 100 on every Linux configuration Go supports.
	return (ut + st) / 100
}

// status is the part of GET /replication/status replbench reads.
type status struct {
	Role string  `json:"role"`
	ISR  []int32 `json:"isr"`
	Raft *struct {
		Serving bool `json:"serving"`
	} `json:"raft"`
}

var httpc = &http.Client{Timeout: 2 * time.Second}

func (r *replica) status() (*status, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/replication/status", r.replicaPort), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status: %s", resp.Status)
	}
	var st status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// waitLeader polls every replica's status until one says it is the leader
// and (in failover mode) serving clients.
func waitLeader(ctx context.Context, rs []*replica, within time.Duration) (*replica, *status, error) {
	deadline := time.Now().Add(within)
	for {
		for _, r := range rs {
			st, err := r.status()
			if err == nil && st.Role == "leader" && (st.Raft == nil || st.Raft.Serving) {
				return r, st, nil
			}
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("no replica served as leader within %s", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// caseSpec is one acks × partitions × mode point.
type caseSpec struct {
	acks, partitions int
	mode             string
	// group, if set, is the one group (1-based) that owns every
	// partition of the case's topic (a manual replica assignment);
	// killOther says that another group's leader is killed mid-case.
	group     int
	killOther bool
}

func (c caseSpec) label() string {
	l := fmt.Sprintf("acks=%d p=%d %s", c.acks, c.partitions, c.mode)
	if c.group > 0 {
		l += fmt.Sprintf(" in g%d", c.group)
	}
	if c.killOther {
		l += ", other group's leader killed"
	}
	return l
}

// topicName repeats internal/bench's naming (<prefix>-<run-id>-acks<all|N>-
// p<N>-<pipe|sync|txn>, documented in docs/BENCHMARKS.md), which --no-create
// relies on.
func topicName(prefix, runID string, c caseSpec) string {
	acks := fmt.Sprint(c.acks)
	if c.acks == -1 {
		acks = "all"
	}
	mode := "pipe"
	switch c.mode {
	case "one-at-a-time":
		mode = "sync"
	case "transactional":
		mode = "txn"
	}
	return fmt.Sprintf("%s-%s-acks%s-p%d-%s", prefix, runID, acks, c.partitions, mode)
}

func run(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	dir := cfg.workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "replbench-")
		if err != nil {
			return err
		}
		dir = d
		defer os.RemoveAll(dir)
	}
	rs, err := writeConfigs(dir, cfg.replicas, cfg.groups, cfg.serverExtra, cfg.replExtra, cfg.profileDir != "")
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	for _, r := range rs {
		if err := r.start(cfg.server); err != nil {
			return err
		}
	}
	var addrs []string
	for _, r := range rs {
		addrs = append(addrs, r.clientAddr())
	}
	leader := rs[0]
	if cfg.replicas > 1 {
		for g := range cfg.groups {
			l, st, err := waitLeader(ctx, rs[g*cfg.replicas:(g+1)*cfg.replicas], 60*time.Second)
			if err != nil {
				return err
			}
			if g == 0 {
				leader = l
			}
			fmt.Fprintf(stderr, "replbench: replica %d serves as leader of group %d, ISR %v; work dir %s\n", l.id, g+1, st.ISR, dir)
		}
	}

	adminCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer adminCl.Close()

	rep := &bench.Report{
		Version:    bench.ReportVersion,
		Target:     cfg.name,
		Brokers:    strings.Join(addrs, ","),
		Tool:       "replbench (moonmq bench per case)",
		Started:    time.Now().UTC(),
		RecordSize: cfg.recordSize,
		Duration:   cfg.duration.Seconds(),
		Host:       bench.HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU()},
		Results:    []bench.CaseResult{},
	}
	switch {
	case cfg.replicas == 1:
		rep.Notes = append(rep.Notes, "MoonMQ single node (no Replication block)")
	case cfg.groups > 1:
		rep.Notes = append(rep.Notes, fmt.Sprintf("MoonMQ cluster mode: %d replication groups of %d replicas, failover mode, separate processes on loopback; each topic split between the groups; client seeded with all of them", cfg.groups, cfg.replicas))
	default:
		rep.Notes = append(rep.Notes, fmt.Sprintf("MoonMQ %d replicas, failover mode, separate processes on loopback; client seeded with all of them", cfg.replicas))
	}
	runID := strconv.FormatInt(time.Now().Unix(), 36)
	var cases []caseSpec
	for _, a := range cfg.acks {
		for _, p := range cfg.partitions {
			for _, m := range cfg.modes {
				cases = append(cases, caseSpec{acks: a, partitions: p, mode: m})
			}
		}
	}
	failed := 0
	record := func(res bench.CaseResult, note string) {
		if res.Error != "" {
			failed++
		}
		rep.Results = append(rep.Results, res)
		rep.Notes = append(rep.Notes, note)
		fmt.Fprintf(stderr, "replbench: %s\n", note)
	}
	for i, c := range cases {
		if ctx.Err() != nil {
			break
		}
		if cfg.replicas > 1 {
			if leader, _, err = waitLeader(ctx, rs[:cfg.replicas], 60*time.Second); err != nil {
				return err
			}
		}
		record(runCase(ctx, cfg, adminCl, rs, leader, addrs, dir, fmt.Sprintf("%s%d", runID, i), c, cfg.duration, nil, stderr))
	}
	if cfg.otherFailover && cfg.groups > 1 && ctx.Err() == nil {
		for j, kill := range []bool{false, true} {
			c := caseSpec{acks: -1, partitions: cfg.partitions[0], mode: "pipelined", group: 2, killOther: kill}
			g1, _, err := waitLeader(ctx, rs[:cfg.replicas], 60*time.Second)
			if err != nil {
				return err
			}
			var during func()
			if kill {
				during = func() {
					time.Sleep(cfg.duration / 3)
					fmt.Fprintf(stderr, "replbench: killing replica %d, the leader of group 1, with SIGKILL\n", g1.id)
					g1.cmd.Process.Kill()
					<-g1.exited
				}
			}
			record(runCase(ctx, cfg, adminCl, rs, leader, addrs, dir, fmt.Sprintf("%sf%d", runID, j), c, cfg.duration, during, stderr))
		}
	}
	if cfg.profileDir != "" && ctx.Err() == nil {
		if err := profileCase(ctx, cfg, adminCl, rs, addrs, dir, runID, stderr); err != nil {
			fmt.Fprintf(stderr, "replbench: profiling: %v\n", err)
		}
	}
	if err := bench.WriteTable(stdout, rep); err != nil {
		return err
	}
	if cfg.jsonPath != "" {
		if err := bench.WriteJSON(cfg.jsonPath, rep); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(rep.Results))
	}
	return nil
}

// runCase creates the case's topic, runs `moonmq bench` for that one case,
// deletes the topic and returns the case's result with a note on CPU use and
// the ISR afterwards. during, if set, runs while the bench process runs, and runCase
// returns only after it has.
func runCase(ctx context.Context, cfg *config, cl *kgo.Client, rs []*replica, leader *replica, addrs []string, dir, runID string, c caseSpec, duration time.Duration, during func(), stderr io.Writer) (bench.CaseResult, string) {
	const prefix = "repl-bench"
	adm := kadm.NewClient(cl)
	res := bench.CaseResult{Case: c.label(), Acks: c.acks, Partitions: c.partitions, Mode: c.mode}
	topic := topicName(prefix, runID, c)
	res.Topic = topic
	// A cluster takes CreateTopics once its brokers have registered
	// with the metadata log; until then it refuses (no live group, no
	// metadata leader yet).
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	var err error
	for {
		if c.group > 0 {
			err = createInGroup(cctx, cl, topic, c.partitions, rs, c.group, cfg.replicas)
		} else {
			var resp kadm.CreateTopicResponse
			resp, err = adm.CreateTopic(cctx, int32(c.partitions), -1, nil, topic)
			if err == nil {
				err = resp.Err
			}
		}
		if err == nil || cfg.groups == 1 || cctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err != nil {
		res.Error = fmt.Sprintf("creating topic %s: %v", topic, err)
		return res, c.label() + ": " + res.Error
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if resp, err := adm.DeleteTopic(dctx, topic); err != nil || resp.Err != nil {
			fmt.Fprintf(stderr, "replbench: deleting %s: %v %v\n", topic, err, resp.Err)
		}
	}()

	out := filepath.Join(dir, fmt.Sprintf("case-%s.json", runID))
	args := []string{"bench", "--brokers", strings.Join(addrs, ","), "--name", cfg.name,
		"--no-create", "--topic-prefix", prefix, "--run-id", runID,
		"--acks", fmt.Sprint(c.acks), "--partitions", fmt.Sprint(c.partitions), "--modes", c.mode,
		"--duration", duration.String(), "--record-size", fmt.Sprint(cfg.recordSize), "--json", out}
	// A case in one group measures that group's replicas only (another
	// group's leader may be killed during it).
	if c.group > 0 {
		rs = rs[(c.group-1)*cfg.replicas : c.group*cfg.replicas]
		if l, _, err := waitLeader(ctx, rs, 10*time.Second); err == nil {
			leader = l
		}
	}
	var pids []string
	for _, r := range rs {
		if r.cmd != nil && r.cmd.Process != nil {
			pids = append(pids, fmt.Sprint(r.cmd.Process.Pid))
		}
	}
	if len(pids) > 0 {
		// Every replica's CPU and memory, in the case's own result.
		args = append(args, "--broker-pids", strings.Join(pids, ","))
	}
	args = append(args, cfg.benchArgs...)
	cmd := exec.CommandContext(ctx, cfg.moonmq, args...)
	// The per-case table is noise next to the merged one: progress and the
	// table both go to stderr.
	cmd.Stdout, cmd.Stderr = stderr, stderr
	before := make([]float64, len(rs))
	for i, r := range rs {
		before[i] = r.cpuSeconds()
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		res.Error = err.Error()
		return res, c.label() + ": " + res.Error
	}
	duringDone := make(chan struct{})
	if during != nil {
		go func() { during(); close(duringDone) }()
	} else {
		close(duringDone)
	}
	runErr := cmd.Wait()
	wall := time.Since(t0).Seconds()
	used := make([]string, len(rs))
	total := 0.0
	for i, r := range rs {
		d := r.cpuSeconds() - before[i]
		total += d
		tag := ""
		if len(rs) > 1 && r == leader {
			tag = " (leader)"
		}
		used[i] = fmt.Sprintf("r%d%s %.1fs", r.id, tag, d)
	}
	client := 0.0
	if ps := cmd.ProcessState; ps != nil {
		client = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	note := fmt.Sprintf("%s: CPU over %.1fs wall (produce and consume): %s, client %.1fs; brokers+client %.2f cores",
		c.label(), wall, strings.Join(used, ", "), client, (total+client)/wall)
	if len(rs) > 1 {
		if st, err := leader.status(); err == nil {
			note += fmt.Sprintf("; ISR after the case %v", st.ISR)
		} else {
			note += fmt.Sprintf("; leader status after the case: %v", err)
		}
	}

	<-duringDone

	b, err := os.ReadFile(out)
	if err != nil {
		res.Error = fmt.Sprintf("moonmq bench: %v (no report: %v)", runErr, err)
		return res, note
	}
	var r bench.Report
	if err := json.Unmarshal(b, &r); err != nil || len(r.Results) != 1 {
		res.Error = fmt.Sprintf("moonmq bench report %s unreadable or not one case: %v", out, err)
		return res, note
	}
	got := r.Results[0]
	if got.Error == "" && runErr != nil {
		got.Error = runErr.Error()
	}
	got.Case = c.label()
	return got, note
}

// createInGroup creates topic with every partition in group g (1-based):
// a manual assignment listing that group's replicas, as kafka-topics
// --replica-assignment would.
func createInGroup(ctx context.Context, cl *kgo.Client, topic string, partitions int, rs []*replica, g, n int) error {
	var ids []int32
	for _, r := range rs[(g-1)*n : g*n] {
		ids = append(ids, int32(r.id))
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p := range partitions {
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: int32(p), Replicas: ids})
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("CreateTopics: %d topics in the answer", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		msg := ""
		if m := resp.Topics[0].ErrorMessage; m != nil {
			msg = ": " + *m
		}
		return fmt.Errorf("%w%s", err, msg)
	}
	return nil
}

// profileCase runs one unmeasured case while taking a CPU profile of every
// replica through its metrics port, and writes them to cfg.profileDir. It is
// separate from the measured cases so that profiling never slows them.
func profileCase(ctx context.Context, cfg *config, cl *kgo.Client, rs []*replica, addrs []string, dir, runID string, stderr io.Writer) error {
	if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
		return err
	}
	leader := rs[0]
	if cfg.replicas > 1 {
		var err error
		if leader, _, err = waitLeader(ctx, rs, 60*time.Second); err != nil {
			return err
		}
	}
	c := caseSpec{acks: cfg.acks[0], partitions: cfg.profileParts, mode: cfg.profileMode}
	errs := make([]error, len(rs))
	during := func() {
		// Skip the client's start-up and warm-up before sampling.
		time.Sleep(time.Second)
		var wg sync.WaitGroup
		for i, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				role := "follower"
				if r == leader {
					role = "leader"
				}
				path := filepath.Join(cfg.profileDir, fmt.Sprintf("%s-r%d.pprof", role, r.id))
				errs[i] = fetchProfile(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", r.metricsPort, cfg.profileSecs), path)
			}()
		}
		wg.Wait()
	}
	_, note := runCase(ctx, cfg, cl, rs, leader, addrs, dir, runID+"prof", c,
		time.Duration(cfg.profileSecs+2)*time.Second, during, stderr)
	fmt.Fprintf(stderr, "replbench: profiled %s\n", note)
	note = "profiled run (not in the table): " + note
	if err := os.WriteFile(filepath.Join(cfg.profileDir, "profiled-case.txt"), []byte(note+"\n"), 0o644); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
