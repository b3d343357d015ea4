// Package testcluster is test support that starts real `moonmq` broker
// processes on loopback: a replication group of N replicas (failover or
// static mode) or a single broker, each with its own data directory, ports
// and log file. Tests kill, stop, pause, resume and restart the processes
// with real signals, find the serving leader through GET
// /replication/status, and talk to the group with franz-go clients seeded
// with every replica.
//
// It is used by the process tests (test/cluster, cmd/moonmq) and by the
// fault harness (internal/chaos) built on top of it. Nothing in it is imported
// by the broker.
//
// The moonmq binary is built once per test binary (Binary); a package's
// TestMain may call Main to remove it afterwards. MOONMQ_BINARY names a
// prebuilt binary instead.
//
// A Cluster belongs to a Harness: a *testing.T in tests, a Standalone in
// `moonmq chaos`. The package does not import testing, so the broker binary
// can run the fault harness without linking it.
package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/storage"
)

// BinaryEnv names an environment variable holding the path of a prebuilt
// moonmq binary; when set, Binary does not build one.
const BinaryEnv = "MOONMQ_BINARY"

// readyLine is what a broker logs once its listeners are open.
const readyLine = "moonmq serving"

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the path of a moonmq binary built from this module's
// working tree, building it on the first call in this test binary.
func Binary(t Harness) string {
	t.Helper()
	if p := os.Getenv(BinaryEnv); p != "" {
		return p
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "moonmq-testcluster-")
		if err != nil {
			built.err = err
			return
		}
		built.dir, built.path = dir, filepath.Join(dir, "moonmq")
		// An import path, not ".": the test's working directory is its
		// own package, anywhere in the module.
		cmd := exec.Command("go", "build", "-o", built.path, "github.com/moonmq/moonmq/cmd/moonmq")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build moonmq: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// Option configures a Cluster.
type Option func(*options)

type options struct {
	replicas     int
	groups       int
	failover     bool
	token        string
	ackTimeout   float64
	isrLag       float64
	lagMax       int64
	leaderRole   int
	logLevel     string
	binary       string
	startTimeout time.Duration
	logTail      int
	server       map[string]any
	replication  map[string]any
	mapAddr      func(Link) string
	env          func(id int) []string
	ownGroup     bool
}

// WithReplicas sets the group size (default 3). One replica runs a single
// broker without a Replication block.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithGroups runs a cluster of n failover groups (cluster mode,
// docs/CLUSTER.md), each of WithReplicas replicas: replicas 1..R are group
// g1, R+1..2R group g2, and so on. The metadata log's voters are the
// first two replicas of g1 and the first of g2 (g1's first three with one
// group).
func WithGroups(n int) Option { return func(o *options) { o.groups = n } }

// WithFailover chooses failover mode (true, the default) or static mode.
func WithFailover(on bool) Option { return func(o *options) { o.failover = on } }

// WithToken sets the replication Token (default "testcluster-token").
func WithToken(tok string) Option { return func(o *options) { o.token = tok } }

// WithAckTimeout sets Replication.AckTimeout in seconds (default 5).
func WithAckTimeout(seconds float64) Option { return func(o *options) { o.ackTimeout = seconds } }

// WithIsrLagSeconds sets Replication.IsrLagSeconds (default 1, so that
// ISR changes happen within a test's patience).
func WithIsrLagSeconds(seconds float64) Option { return func(o *options) { o.isrLag = seconds } }

// WithLagMax sets Replication.LagMax (static mode).
func WithLagMax(records int64) Option { return func(o *options) { o.lagMax = records } }

// WithLeaderRole gives replica id Role "leader" and every other replica
// Role "follower" (default: replica 1). 0 gives every replica "follower".
func WithLeaderRole(id int) Option { return func(o *options) { o.leaderRole = id } }

// WithLogLevel sets Server.LogLevel (default "info").
func WithLogLevel(level string) Option { return func(o *options) { o.logLevel = level } }

// WithBinary runs the given moonmq binary instead of building one.
func WithBinary(path string) Option { return func(o *options) { o.binary = path } }

// WithStartTimeout bounds how long a process may take to open its
// listeners (default 60 s: loaded CI machines are slow).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithLogTail sets how many lines of each replica's log are printed when
// the test fails (default 120).
func WithLogTail(lines int) Option { return func(o *options) { o.logTail = lines } }

// WithServer sets a key of every replica's Server block (for example
// "RetentionCheckMs" or "Acks"), overriding the harness's value.
func WithServer(key string, value any) Option {
	return func(o *options) { o.server[key] = value }
}

// WithReplication sets a key of every replica's Replication block,
// overriding the harness's value.
func WithReplication(key string, value any) Option {
	return func(o *options) { o.replication[key] = value }
}

// LinkKind tells the two kinds of connection a configuration names apart.
type LinkKind int

const (
	// ReplicationLink is replica From's connections to replica To's
	// replication port (Raft, shipping, status polls).
	ReplicationLink LinkKind = iota
	// ClientLink is Kafka clients' connections to replica To's client
	// port; From is 0, because every replica advertises one address for
	// each member, whoever asks.
	ClientLink
	// GroupLink is the connections of other groups' brokers to replica
	// To's replication port in cluster mode (the address it registers,
	// Cluster.ReplicationAddress); From is 0, as for a ClientLink.
	GroupLink
)

// Link is one directed connection that a configuration names an address
// for.
type Link struct {
	Kind     LinkKind
	From, To int
}

// WithAddressMapper makes the configurations name f(link) instead of the
// replica's own port wherever one replica addresses another
// (Peers[].Address for a ReplicationLink) or advertises a client address
// (ClientAddress and Peers[].ClientAddress for a ClientLink) or registers
// a replication address for other groups (Cluster.ReplicationAddress for
// a GroupLink, left out when f has none). A fault
// harness returns the address of a proxy it controls; an empty answer keeps
// the real address. f is called by New, after every replica's ports are
// chosen and before any process starts.
func WithAddressMapper(f func(Link) string) Option { return func(o *options) { o.mapAddr = f } }

// WithEnv adds f(id) to the environment of replica id's process, asked
// again at every start, so a harness can run one start of a replica in a
// test-only mode and the next one without it.
func WithEnv(f func(id int) []string) Option { return func(o *options) { o.env = f } }

// WithOwnProcessGroup starts every process in a process group of its own,
// so that a Ctrl-C at the terminal reaches the program that owns the
// cluster and not the brokers (which would otherwise shut down on their
// own, unasked). A command sets it; tests do not need it.
func WithOwnProcessGroup() Option { return func(o *options) { o.ownGroup = true } }

// Cluster is a group of broker processes owned by one test (or one
// Harness).
type Cluster struct {
	t        Harness
	opts     options
	binary   string
	Replicas []*Replica
}

// Replica is one broker process of a Cluster, with the ports and data
// directory it keeps across restarts.
type Replica struct {
	// ID is the ReplicaId (1..N).
	ID int
	// Group is its group's index (0 for g1) in a cluster (WithGroups).
	Group int
	// ClientPort, MetricsPort and ReplicatePort are its loopback ports.
	ClientPort, MetricsPort, ReplicatePort int
	// DataDir is its Server.DataDir, kept across restarts.
	DataDir string
	// ConfigPath is its configuration file.
	ConfigPath string
	// LogPath collects the output of every run of the process.
	LogPath string

	c       *Cluster
	mu      sync.Mutex
	proc    *process
	readyCh chan struct{}
	starts  int
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited closes
	// asked is set before the harness signals the process to end, so that
	// an exit on its own can be told apart.
	asked  bool
	paused bool
}

// New writes the configuration of every replica without starting any.
func New(t Harness, opts ...Option) *Cluster {
	t.Helper()
	o := options{replicas: 3, groups: 1, failover: true, token: "testcluster-token", ackTimeout: 5, isrLag: 1,
		leaderRole: 1, logLevel: "info", startTimeout: 60 * time.Second, logTail: 120,
		server: map[string]any{}, replication: map[string]any{}}
	for _, f := range opts {
		f(&o)
	}
	if o.replicas < 1 {
		t.Fatalf("testcluster: %d replicas", o.replicas)
	}
	if o.groups < 1 || o.groups > 1 && (o.replicas < 3 || !o.failover) {
		t.Fatalf("testcluster: %d groups of %d replicas (failover %v): a cluster is of failover groups of 3 or 5", o.groups, o.replicas, o.failover)
	}
	c := &Cluster{t: t, opts: o, binary: o.binary}
	if c.binary == "" {
		c.binary = Binary(t)
	}
	logs := t.TempDir()
	n := o.replicas * o.groups
	ports := freePorts(t, 3*n)
	for i := range n {
		c.Replicas = append(c.Replicas, &Replica{
			ID: i + 1, Group: i / o.replicas, ClientPort: ports[3*i], MetricsPort: ports[3*i+1], ReplicatePort: ports[3*i+2],
			DataDir: t.TempDir(), LogPath: filepath.Join(logs, fmt.Sprintf("replica-%d.log", i+1)), c: c,
		})
	}
	for _, r := range c.Replicas {
		r.ConfigPath = filepath.Join(logs, fmt.Sprintf("replica-%d.json", r.ID))
		b, err := json.MarshalIndent(map[string]any{"Server": c.serverBlock(r)}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.ConfigPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Registered after the temporary directories, so it runs before they
	// are removed: no process may still be writing into them.
	t.Cleanup(c.cleanup)
	return c
}

// Start writes the configurations and starts every replica.
func Start(t Harness, opts ...Option) *Cluster {
	t.Helper()
	c := New(t, opts...)
	c.StartAll()
	return c
}

func (c *Cluster) serverBlock(r *Replica) map[string]any {
	o := c.opts
	s := map[string]any{
		"Host": "127.0.0.1", "Port": r.ClientPort, "MetricsPort": r.MetricsPort,
		"DataDir": r.DataDir, "LogLevel": o.logLevel,
	}
	if o.replicas > 1 {
		var peers []map[string]any
		for _, p := range c.Replicas {
			if p != r && p.Group == r.Group {
				peers = append(peers, map[string]any{"Id": p.ID,
					"Address":       c.linkAddr(Link{ReplicationLink, r.ID, p.ID}, p.ReplicateAddr()),
					"ClientAddress": c.linkAddr(Link{ClientLink, 0, p.ID}, p.ClientAddr())})
			}
		}
		role := "follower"
		if r.ID-r.Group*o.replicas == o.leaderRole {
			role = "leader"
		}
		repl := map[string]any{
			"Enabled": true, "ReplicaId": r.ID, "Role": role,
			"ReplicateHost": "127.0.0.1", "ReplicatePort": r.ReplicatePort, "ClientAddress": c.linkAddr(Link{ClientLink, 0, r.ID}, r.ClientAddr()),
			"Token": o.token, "AckTimeout": o.ackTimeout, "IsrLagSeconds": o.isrLag,
			"Peers": peers, "Failover": map[string]any{"Enabled": o.failover},
		}
		if !o.failover {
			repl["LagMax"] = o.lagMax
		}
		for k, v := range o.replication {
			repl[k] = v
		}
		s["Replication"] = repl
	}
	if o.groups > 1 {
		var voters []map[string]any
		for _, id := range MetadataVoters(o.replicas) {
			v := c.Replicas[id-1]
			voters = append(voters, map[string]any{"Id": id, "Address": c.linkAddr(Link{ReplicationLink, r.ID, id}, v.ReplicateAddr())})
		}
		cl := map[string]any{"Enabled": true, "Experimental": true, "ClusterId": "testcluster",
			"BrokerId": r.ID, "GroupId": r.GroupID(), "MetadataVoters": voters}
		if a := c.linkAddr(Link{GroupLink, 0, r.ID}, ""); a != "" {
			cl["ReplicationAddress"] = a
		}
		s["Cluster"] = cl
	}
	for k, v := range o.server {
		s[k] = v
	}
	return s
}

// linkAddr is the address the configurations name for l: the mapper's
// answer, or real when there is no mapper or it has none.
func (c *Cluster) linkAddr(l Link, real string) string {
	if c.opts.mapAddr != nil {
		if a := c.opts.mapAddr(l); a != "" {
			return a
		}
	}
	return real
}

// freePorts returns n loopback ports no other pick in this process got.
func freePorts(t Harness, n int) []int {
	t.Helper()
	ports, err := freeport.PickN(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// cleanup kills what still runs, reports processes that ended on their
// own, and prints the tail of every log if the test failed.
func (c *Cluster) cleanup() {
	for _, r := range c.Replicas {
		r.mu.Lock()
		p := r.proc
		asked := p != nil && p.asked
		r.mu.Unlock()
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
			if !asked {
				c.t.Errorf("testcluster: replica %d exited without being asked to: %v", r.ID, p.err)
			}
		default:
			r.signalAndWait(syscall.SIGKILL, 0)
		}
	}
	if !c.t.Failed() {
		return
	}
	for _, r := range c.Replicas {
		c.t.Logf("testcluster: last %d lines of replica %d's log (%s):\n%s", c.opts.logTail, r.ID, r.LogPath, tail(r.LogPath, c.opts.logTail))
	}
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	ls := strings.SplitAfter(string(b), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "")
}

// StartAll starts every replica that is not running, all at once, and
// waits until each has opened its listeners.
func (c *Cluster) StartAll() {
	c.t.Helper()
	var started []*Replica
	for _, r := range c.Replicas {
		if !r.Running() {
			r.spawn()
			started = append(started, r)
		}
	}
	for _, r := range started {
		r.waitReady()
	}
}

// Replica returns the replica with ReplicaId id.
func (c *Cluster) Replica(id int) *Replica {
	c.t.Helper()
	for _, r := range c.Replicas {
		if r.ID == id {
			return r
		}
	}
	c.t.Fatalf("testcluster: no replica %d", id)
	return nil
}

// Others returns the replicas other than those given.
func (c *Cluster) Others(not ...*Replica) []*Replica {
	var out []*Replica
	for _, r := range c.Replicas {
		if !slices.Contains(not, r) {
			out = append(out, r)
		}
	}
	return out
}

// Addrs returns every replica's client address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		out[i] = r.ClientAddr()
	}
	return out
}

// ClientAddr is the replica's Kafka address.
func (r *Replica) ClientAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.ClientPort) }

// ReplicateAddr is the replica's replication (HTTP) address.
func (r *Replica) ReplicateAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.ReplicatePort) }

// MetricsAddr is the replica's metrics address.
func (r *Replica) MetricsAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.MetricsPort) }

// String names the replica in test messages.
func (r *Replica) String() string { return fmt.Sprintf("replica %d", r.ID) }

// readyWriter appends a process's output to its log file and notices the
// line that says the listeners are open.
type readyWriter struct {
	f     *os.File
	ready chan struct{}
	once  sync.Once
	mu    sync.Mutex
	part  []byte
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.f.Write(b)
	w.part = append(w.part, b...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		if bytes.Contains(w.part[:i], []byte(readyLine)) {
			w.once.Do(func() { close(w.ready) })
		}
		w.part = w.part[i+1:]
	}
	return n, err
}

// Start starts the replica's process on its data directory (a restart if
// it ran before) and waits until it has opened its listeners.
func (r *Replica) Start() {
	r.c.t.Helper()
	r.spawn()
	r.waitReady()
}

func (r *Replica) spawn() {
	t := r.c.t
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		select {
		case <-r.proc.exited:
		default:
			t.Fatalf("testcluster: %v is already running", r)
		}
	}
	f, err := os.OpenFile(r.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r.starts++
	fmt.Fprintf(f, "=== testcluster: start %d of replica %d at %s ===\n", r.starts, r.ID, time.Now().Format(time.RFC3339Nano))
	w := &readyWriter{f: f, ready: make(chan struct{})}
	cmd := exec.Command(r.c.binary, "serve", "--config", r.ConfigPath)
	cmd.Stdout, cmd.Stderr = w, w
	var extra []string
	if r.c.opts.env != nil {
		extra = r.c.opts.env(r.ID)
	}
	if r.c.opts.groups > 1 && os.Getenv("GOMAXPROCS") == "" && !slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, "GOMAXPROCS=") }) {
		// A cluster of groups runs six or more brokers on a machine of
		// two cores: each gets one, as docs/CLUSTER.md's proof asks.
		extra = append(extra, "GOMAXPROCS=1")
	}
	if len(extra) > 0 {
		cmd.Env = append(os.Environ(), extra...)
		fmt.Fprintf(f, "=== testcluster: environment %s ===\n", strings.Join(extra, " "))
	}
	dieWithParent(cmd, r.c.opts.ownGroup)
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("testcluster: start %v: %v", r, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(f, "=== testcluster: replica %d exited: %v ===\n", r.ID, p.err)
		f.Close()
		close(p.exited)
	}()
	r.proc = p
	r.readyCh = w.ready
}

// TryStart is Start for a harness that expects a start to fail now and
// then (a replica whose data was damaged on purpose): it returns an error
// instead of failing the test when the process exits while starting or
// does not open its listeners in time (it is then killed). The end is
// taken as asked for, so the cleanup does not report it again.
func (r *Replica) TryStart() error {
	r.c.t.Helper()
	r.spawn()
	r.mu.Lock()
	p, ready := r.proc, r.readyCh
	r.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-p.exited:
		r.mu.Lock()
		p.asked = true
		r.mu.Unlock()
		return fmt.Errorf("%v exited while starting (%v):\n%s", r, p.err, tail(r.LogPath, r.c.opts.logTail))
	case <-time.After(r.c.opts.startTimeout):
		r.signalAndWait(syscall.SIGKILL, 0)
		return fmt.Errorf("%v did not open its listeners within %v:\n%s", r, r.c.opts.startTimeout, tail(r.LogPath, r.c.opts.logTail))
	}
}

func (r *Replica) waitReady() {
	t := r.c.t
	t.Helper()
	r.mu.Lock()
	p, ready := r.proc, r.readyCh
	r.mu.Unlock()
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("testcluster: %v exited while starting (%v):\n%s", r, p.err, tail(r.LogPath, r.c.opts.logTail))
	case <-time.After(r.c.opts.startTimeout):
		t.Fatalf("testcluster: %v did not open its listeners within %v:\n%s", r, r.c.opts.startTimeout, tail(r.LogPath, r.c.opts.logTail))
	}
}

// Running reports whether the replica's process is alive (paused counts
// as alive).
func (r *Replica) Running() bool {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the replica was paused with Pause and not resumed.
func (r *Replica) Paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil && r.proc.paused && r.running()
}

func (r *Replica) running() bool {
	select {
	case <-r.proc.exited:
		return false
	default:
		return true
	}
}

// Kill ends the process with SIGKILL and waits for it: nothing is
// flushed, nothing shut down.
func (r *Replica) Kill() {
	r.c.t.Helper()
	r.signalAndWait(syscall.SIGKILL, 0)
}

// Stop ends the process with SIGTERM (a clean shutdown) and waits for it,
// at most within; after that it is killed and the test fails.
func (r *Replica) Stop(within time.Duration) {
	t := r.c.t
	t.Helper()
	if !r.signalAndWait(syscall.SIGTERM, within) {
		t.Errorf("testcluster: %v did not stop within %v of SIGTERM; killed", r, within)
	}
}

// signalAndWait sends sig and waits for the exit; with a positive within
// it kills the process after that long and reports false.
func (r *Replica) signalAndWait(sig syscall.Signal, within time.Duration) bool {
	r.mu.Lock()
	p := r.proc
	if p == nil || !r.running() {
		r.mu.Unlock()
		r.c.t.Fatalf("testcluster: %v is not running", r)
		return false
	}
	p.asked = true
	paused := p.paused
	r.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
	if paused && sig != syscall.SIGKILL {
		// A stopped process acts on SIGTERM only once continued.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	if within <= 0 {
		<-p.exited
		return true
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(within):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return false
	}
}

// Pause stops the process with SIGSTOP: its sockets stay open and nothing
// answers, as a machine that hangs.
func (r *Replica) Pause() {
	r.c.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || !r.running() {
		r.c.t.Fatalf("testcluster: %v is not running", r)
	}
	if err := r.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.c.t.Fatalf("testcluster: SIGSTOP %v: %v", r, err)
	}
	r.proc.paused = true
	// The signal is queued, not yet acted on: a test that pauses followers
	// and then writes must know they no longer fetch.
	pid := r.proc.cmd.Process.Pid
	if err := Poll(10*time.Second, func() (bool, string) {
		st, ok := procState(pid)
		return !ok || st == 'T' || st == 't', fmt.Sprintf("process state %c", st)
	}); err != nil {
		r.c.t.Fatalf("testcluster: %v not stopped after SIGSTOP: %v", r, err)
	}
}

// procState is the state letter of /proc/<pid>/stat; ok is false where
// there is no /proc.
func procState(pid int) (state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// Resume continues a paused process with SIGCONT.
func (r *Replica) Resume() {
	r.c.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || !r.running() {
		r.c.t.Fatalf("testcluster: %v is not running", r)
	}
	if err := r.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.c.t.Fatalf("testcluster: SIGCONT %v: %v", r, err)
	}
	r.proc.paused = false
}

// Log returns everything the replica's processes have written so far.
func (r *Replica) Log() string {
	b, _ := os.ReadFile(r.LogPath)
	return string(b)
}

// serving reports whether s is the status of the serving leader.
func serving(s status.Replication) bool {
	if s.Role != "leader" {
		return false
	}
	return s.Raft == nil || (s.Raft.Serving && s.Raft.HasISR)
}

var statusClient = &http.Client{Timeout: 2 * time.Second}

// Status asks the replica's replication port for its status.
func (r *Replica) Status() (status.Replication, error) {
	var st status.Replication
	err := getJSON("http://"+r.ReplicateAddr()+"/replication/status", r.c.opts.token, &st)
	return st, err
}

// getJSON decodes a GET of url (with the bearer token, if any) into v.
func getJSON(url, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Token is the replication token the replicas share.
func (c *Cluster) Token() string { return c.opts.token }

// Stats reads the replica's /stats document.
func (r *Replica) Stats() (status.Stats, error) {
	var st status.Stats
	err := getJSON("http://"+r.MetricsAddr()+"/stats", "", &st)
	return st, err
}

// Serving reports whether a replication status says its replica serves
// clients as its group's leader.
func Serving(s status.Replication) bool { return serving(s) }

// Up returns the replicas whose process runs and is not paused.
func (c *Cluster) Up() []*Replica {
	var out []*Replica
	for _, r := range c.Replicas {
		if r.Running() && !r.Paused() {
			out = append(out, r)
		}
	}
	return out
}

// MetadataVoters are the ids of a cluster's metadata voters, for groups
// of replicas each: the first two brokers of g1 and the first of g2.
func MetadataVoters(replicas int) []int { return []int{1, 2, replicas + 1} }

// GroupID is the replica's Cluster.GroupId: g1, g2, ...
func (r *Replica) GroupID() string { return fmt.Sprintf("g%d", r.Group+1) }

// InGroup returns the replicas of group g (0 for g1).
func (c *Cluster) InGroup(g int) []*Replica {
	var out []*Replica
	for _, r := range c.Replicas {
		if r.Group == g {
			out = append(out, r)
		}
	}
	return out
}

// ServingLeader returns the replica that reports itself the serving
// leader now (the highest epoch if, briefly, two do), or nil.
func (c *Cluster) ServingLeader() (*Replica, status.Replication) {
	return servingLeaderAmong(c.Up())
}

// ServingLeaderOf is ServingLeader among the replicas of group g.
func (c *Cluster) ServingLeaderOf(g int) (*Replica, status.Replication) {
	var up []*Replica
	for _, r := range c.Up() {
		if r.Group == g {
			up = append(up, r)
		}
	}
	return servingLeaderAmong(up)
}

func servingLeaderAmong(rs []*Replica) (*Replica, status.Replication) {
	var best *Replica
	var bestSt status.Replication
	for _, r := range rs {
		st, err := r.Status()
		if err != nil || !serving(st) {
			continue
		}
		if best == nil || st.Epoch > bestSt.Epoch {
			best, bestSt = r, st
		}
	}
	return best, bestSt
}

// Leader waits up to within for a serving leader among the running
// replicas other than not, and fails the test without one.
func (c *Cluster) Leader(within time.Duration, not ...*Replica) *Replica {
	c.t.Helper()
	var l *Replica
	c.WaitFor(within, "a serving leader", func() (bool, string) {
		r, _ := c.ServingLeader()
		if r == nil || slices.Contains(not, r) {
			return false, c.describe()
		}
		l = r
		return true, ""
	})
	return l
}

// describe summarises every running replica's status for a failure
// message.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, r := range c.Replicas {
		switch {
		case !r.Running():
			fmt.Fprintf(&b, "[%d: down] ", r.ID)
		case r.Paused():
			fmt.Fprintf(&b, "[%d: paused] ", r.ID)
		default:
			st, err := r.Status()
			if err != nil {
				fmt.Fprintf(&b, "[%d: %v] ", r.ID, err)
				continue
			}
			fmt.Fprintf(&b, "[%d: %s leader=%d epoch=%d isr=%v", r.ID, st.Role, st.Leader, st.Epoch, st.ISR)
			if st.Raft != nil {
				fmt.Fprintf(&b, " raft=%s serving=%v term=%d", st.Raft.Role, st.Raft.Serving, st.Raft.RaftTerm)
			}
			b.WriteString("] ")
		}
	}
	return b.String()
}

// WaitFor polls cond until it holds, for at most within, and fails the
// test naming what and cond's last explanation otherwise.
func (c *Cluster) WaitFor(within time.Duration, what string, cond func() (bool, string)) {
	c.t.Helper()
	if err := Poll(within, cond); err != nil {
		c.t.Fatalf("testcluster: no %s within %v: %v", what, within, err)
	}
}

// Poll calls cond every 50 ms until it holds or within has passed; the
// error carries cond's last explanation.
func Poll(within time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitISR waits until a serving leader reports the committed ISR ids (in
// any order) and returns that leader.
func (c *Cluster) WaitISR(within time.Duration, ids ...int) *Replica {
	c.t.Helper()
	want := make([]int32, len(ids))
	for i, id := range ids {
		want[i] = int32(id)
	}
	slices.Sort(want)
	var l *Replica
	c.WaitFor(within, fmt.Sprintf("ISR %v", want), func() (bool, string) {
		r, st := c.ServingLeader()
		if r == nil {
			return false, "no serving leader: " + c.describe()
		}
		got := slices.Clone(st.ISR)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("leader %d reports ISR %v", r.ID, st.ISR)
		}
		l = r
		return true, ""
	})
	return l
}

// Client returns a franz-go client seeded with every replica, with fast
// metadata refreshes and generous retries; it is closed when the test
// ends. opts come last and override.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(c.Addrs()...),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryTimeout(60 * time.Second),
		kgo.ProducerBatchMaxBytes(1 << 20),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client over a Client seeded with every replica.
func (c *Cluster) Admin(opts ...kgo.Opt) *kadm.Client {
	c.t.Helper()
	return kadm.NewClient(c.Client(opts...))
}

// KeyCoordinatedIn returns the first of prefix, prefix-1, prefix-2, ...
// whose coordinator of the given FindCoordinator type (0: a consumer
// group, 1: a transactional id) is a broker of group g (0 for g1), in
// cluster mode. It asks again while FindCoordinator fails (the
// coordinators' topics are created on first use) and fails the test when
// none of 200 keys is coordinated there.
func (c *Cluster) KeyCoordinatedIn(coordinatorType int8, prefix string, g int) string {
	c.t.Helper()
	cl := c.Client()
	defer cl.Close()
	for i, tries := 0, 0; i < 200 && tries < 600; tries++ {
		key := prefix
		if i > 0 {
			key = fmt.Sprintf("%s-%d", prefix, i)
		}
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKey = coordinatorType, key
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := fc.RequestWith(ctx, cl)
		cancel()
		if err != nil || resp.ErrorCode != 0 {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if r := c.Replica(int(resp.NodeID)); r != nil && r.Group == g {
			c.t.Logf("testcluster: %s is coordinated by %d, in g%d", key, resp.NodeID, g+1)
			return key
		}
		i++
	}
	c.t.Fatalf("testcluster: no key %s-N is coordinated in g%d", prefix, g+1)
	return ""
}

// ReadLog returns the raw record batches of one partition as stored in
// the replica's data directory, with the log's start and end offsets. The
// replica must not be running: opening the log recovers it.
func (r *Replica) ReadLog(topic string, partition int32) (data []byte, start, end int64, err error) {
	if r.Running() {
		return nil, 0, 0, fmt.Errorf("%v is running", r)
	}
	dir := filepath.Join(r.DataDir, "topics", topic, fmt.Sprint(partition))
	if _, err := os.Stat(dir); err != nil {
		return nil, 0, 0, err
	}
	l, err := storage.Open(dir, storage.Options{RetentionMs: -1, RetentionBytes: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, 0, 0, err
	}
	defer l.Close()
	start, end = l.StartOffset(), l.EndOffset()
	for off := start; off < end; {
		b, err := l.Read(off, 4<<20, end)
		if err != nil {
			return nil, 0, 0, err
		}
		next := lastOffset(b) + 1
		if len(b) == 0 || next <= off {
			break
		}
		data = append(data, b...)
		off = next
	}
	return data, start, end, nil
}

// LogRecord is one data record decoded from a stored log.
type LogRecord struct {
	Offset int64
	Key    []byte
	Value  []byte
}

// DecodeLog decodes the data records of raw batches as ReadLog returns
// them; control batches (transaction markers) are left out.
func DecodeLog(data []byte) ([]LogRecord, error) {
	batches, err := recordbatch.Split(data)
	if err != nil {
		return nil, err
	}
	var out []LogRecord
	for _, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return nil, err
		}
		if h.Control() {
			continue
		}
		recs, err := recordbatch.Records(b, 64<<20)
		if err != nil {
			return nil, fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
		}
		for _, r := range recs {
			out = append(out, LogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value})
		}
	}
	return out, nil
}

// lastOffset is the last offset of the last whole batch in b, -1 if none.
func lastOffset(b []byte) int64 {
	last := int64(-1)
	for len(b) >= recordbatch.HeaderSize {
		h, err := recordbatch.ParseHeader(b)
		if err != nil || h.Size() > len(b) {
			break
		}
		last = h.LastOffset()
		b = b[h.Size():]
	}
	return last
}

// Context returns a context that ends after d or when the test ends.
func Context(t Harness, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
