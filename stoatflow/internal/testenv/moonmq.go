//go:build unix

package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// MoonMQBinaryEnv names an environment variable holding the path of a
// prebuilt moonmq binary; when it is set, MoonMQ builds none.
const MoonMQBinaryEnv = "MOONMQ_BINARY"

// readyLine is what a moonmq broker logs once its listeners are open.
const readyLine = "moonmq serving"

// startTimeout bounds one broker start: a loaded two-core CI machine
// running a JVM beside the brokers is slow.
const startTimeout = 60 * time.Second

// groupToken is the replication token of every group testenv starts; the
// ports are loopback-only and live for one test.
const groupToken = "stoatflow-testenv"

// Cluster is a set of moonmq broker processes owned by one test: a single
// node, or the replicas of one failover-mode replication group. Its
// methods are meant for the test's own goroutine: Kill and Start from two
// goroutines at once would race.
type Cluster struct {
	t        TB
	bin      string
	replicas []*replica
	extra    map[string]any // more Server keys (MoonMQSASL)
	opts     []kgo.Opt      // what a client needs to log in
}

// replica is one broker with the ports, data directory and log it keeps
// across restarts.
type replica struct {
	id                                 int
	clientPort, metricsPort, replPort  int
	dataDir, configPath, logPath, name string
	proc                               *Process // the latest run, nil before the first
}

func (r *replica) clientAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.clientPort) }
func (r *replica) replAddr() string   { return fmt.Sprintf("127.0.0.1:%d", r.replPort) }
func (r *replica) running() bool      { return r.proc != nil && !r.proc.Exited() }

// MoonMQ starts a moonmq cluster of n replicas and returns once it serves:
// n = 1 is a single broker (no Replication block), n > 1 a failover-mode
// (Raft) group, which is ready when a leader serves with every replica in
// its ISR. Every process is killed when the test ends.
func MoonMQ(t TB, n int) *Cluster {
	t.Helper()
	return moonMQ(t, n, nil, nil)
}

// MoonMQSASL starts a single broker that requires SASL: user logs in with
// password over SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.
func MoonMQSASL(t TB, user, password string) *Cluster {
	t.Helper()
	return moonMQ(t, 1, map[string]any{"Users": []map[string]any{{"Username": user, "Password": password}}},
		[]kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism())})
}

func moonMQ(t TB, n int, extra map[string]any, opts []kgo.Opt) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: MoonMQ with %d replicas", n)
	}
	c := &Cluster{t: t, bin: moonmqBinary(t), extra: extra, opts: opts}
	dir := t.TempDir()
	ports := freePorts(t, 3*n)
	for i := range n {
		id := i + 1
		c.replicas = append(c.replicas, &replica{
			id: id, clientPort: ports[3*i], metricsPort: ports[3*i+1], replPort: ports[3*i+2],
			dataDir:    filepath.Join(dir, fmt.Sprintf("data-%d", id)),
			configPath: filepath.Join(dir, fmt.Sprintf("replica-%d.json", id)),
			logPath:    filepath.Join(dir, fmt.Sprintf("replica-%d.log", id)),
			name:       fmt.Sprintf("moonmq replica %d", id),
		})
	}
	for _, r := range c.replicas {
		if err := os.MkdirAll(r.dataDir, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		b, err := json.MarshalIndent(map[string]any{"Server": c.serverBlock(r)}, "", "  ")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.WriteFile(r.configPath, b, 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	// After TempDir: cleanups run last-registered first, so no broker is
	// still writing when its directory is removed.
	t.Cleanup(c.cleanup)
	// All at once, then wait: a group elects no leader until a majority
	// runs, so waiting for each replica before starting the next would
	// only add up their start times.
	for _, r := range c.replicas {
		c.spawn(r)
	}
	for _, r := range c.replicas {
		c.waitReady(r)
	}
	c.WaitHealthy(startTimeout)
	return c
}

// serverBlock is replica r's Server configuration.
func (c *Cluster) serverBlock(r *replica) map[string]any {
	s := map[string]any{
		"Host": "127.0.0.1", "Port": r.clientPort, "MetricsPort": r.metricsPort,
		"DataDir": r.dataDir, "LogLevel": "info",
	}
	for k, v := range c.extra {
		s[k] = v
	}
	if len(c.replicas) == 1 {
		return s
	}
	var peers []map[string]any
	for _, p := range c.replicas {
		if p != r {
			peers = append(peers, map[string]any{"Id": p.id, "Address": p.replAddr(), "ClientAddress": p.clientAddr()})
		}
	}
	// Before any ISR exists only a replica whose Role is leader (or both)
	// may stand for election; an unset Role means follower, and a group of
	// followers never elects anyone.
	role := "follower"
	if r.id == 1 {
		role = "leader"
	}
	s["Replication"] = map[string]any{
		"Enabled": true, "ReplicaId": r.id, "Role": role,
		"ReplicateHost": "127.0.0.1", "ReplicatePort": r.replPort, "ClientAddress": r.clientAddr(),
		"Token": groupToken, "AckTimeout": 5,
		// The default (10 s) would keep a killed replica in the ISR, and a
		// restarted one out of it, longer than a test wants to wait.
		"IsrLagSeconds": 1,
		"Peers":         peers,
		"Failover":      map[string]any{"Enabled": true},
	}
	return s
}

var moonmqBuild struct {
	once sync.Once
	path string
	err  error
}

// moonmqBinary returns MOONMQ_BINARY, or a moonmq built from the
// repository's working tree once per test binary.
func moonmqBinary(t TB) string {
	t.Helper()
	if p := os.Getenv(MoonMQBinaryEnv); p != "" {
		return p
	}
	moonmqBuild.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			moonmqBuild.err = err
			return
		}
		moonmqBuild.path, moonmqBuild.err = buildOnce(root, "./cmd/moonmq")
	})
	if moonmqBuild.err != nil {
		t.Fatalf("testenv: %v", moonmqBuild.err)
	}
	return moonmqBuild.path
}

// repoRoot is the broker module's root: the parent of the stoatflow
// module, checked to be what it should be, since a build elsewhere would
// test the wrong broker.
func repoRoot() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	parent := filepath.Dir(root)
	if m := goModModule(filepath.Join(parent, "go.mod")); m != "github.com/moonmq/moonmq" {
		return "", fmt.Errorf("%s is not the moonmq repository (its go.mod declares %q); set %s", parent, m, MoonMQBinaryEnv)
	}
	if _, err := os.Stat(filepath.Join(parent, "cmd", "moonmq")); err != nil {
		return "", fmt.Errorf("no cmd/moonmq in %s: %v; set %s", parent, err, MoonMQBinaryEnv)
	}
	return parent, nil
}

func (c *Cluster) spawn(r *replica) {
	c.t.Helper()
	p, err := spawn(r.name, c.bin, []string{"serve", "--config", r.configPath}, nil, "", r.logPath)
	if err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
	p.t = c.t
	r.proc = p
}

// waitReady waits for r's ready line and then for its client port to
// answer Metadata: the line is logged as the listener opens, a moment
// before a client may find the broker able to describe its cluster.
func (c *Cluster) waitReady(r *replica) {
	c.t.Helper()
	var why string
	ok := poll(startTimeout, func() bool {
		if r.proc.Exited() {
			return true
		}
		if !strings.Contains(r.proc.Log(), readyLine) {
			why = "no " + readyLine + " line"
			return false
		}
		if err := metadata(r.clientAddr(), 2*time.Second, c.opts...); err != nil {
			why = "Metadata: " + err.Error()
			return false
		}
		return true
	})
	if r.proc.Exited() {
		_, err := r.proc.Wait(0)
		c.t.Fatalf("testenv: %s exited while starting (%v):\n%s", r.name, err, tail(r.logPath, logTail))
	}
	if !ok {
		c.t.Fatalf("testenv: %s not ready within %v (%s):\n%s", r.name, startTimeout, why, tail(r.logPath, logTail))
	}
}

// cleanup kills what still runs and, if the test failed, prints the tail
// of every replica's log.
func (c *Cluster) cleanup() {
	for _, r := range c.replicas {
		if r.proc != nil {
			r.proc.Kill()
		}
	}
	if !failed(c.t) {
		return
	}
	for _, r := range c.replicas {
		c.t.Logf("testenv: last %d lines of %s's log (%s):\n%s", logTail, r.name, r.logPath, tail(r.logPath, logTail))
	}
}

// Addrs returns every replica's client address, by id.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.replicas))
	for i, r := range c.replicas {
		out[i] = r.clientAddr()
	}
	return out
}

// Bootstrap returns every replica's client address, comma-separated, as
// bootstrap.servers takes them.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

func (c *Cluster) replica(id int) *replica {
	c.t.Helper()
	if id < 1 || id > len(c.replicas) {
		c.t.Fatalf("testenv: no replica %d (the cluster has 1..%d)", id, len(c.replicas))
	}
	return c.replicas[id-1]
}

// Kill ends replica id with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(id int) {
	c.t.Helper()
	r := c.replica(id)
	if !r.running() {
		c.t.Fatalf("testenv: Kill: %s is not running", r.name)
	}
	r.proc.Kill()
}

// Start restarts replica id, after a Kill, on the same data directory and
// ports, and waits until it is ready for clients.
func (c *Cluster) Start(id int) {
	c.t.Helper()
	r := c.replica(id)
	if r.running() {
		c.t.Fatalf("testenv: Start: %s is already running", r.name)
	}
	c.spawn(r)
	c.waitReady(r)
}

// status is the part of a replica's GET /replication/status answer that
// testenv reads. It is served on the replication port (not the metrics
// port) and needs the group's token.
type status struct {
	// Role is "leader" on the replica that leads, else "follower".
	Role  string  `json:"role"`
	Epoch int32   `json:"epoch"`
	ISR   []int32 `json:"isr"`
	// Raft is the failover group's view; only a Raft leader that has
	// applied an ISR and claimed leadership serves clients.
	Raft *struct {
		Role    string `json:"role"`
		Serving bool   `json:"serving"`
		HasISR  bool   `json:"has_isr"`
		Term    uint64 `json:"raft_term"`
	} `json:"raft"`
}

func (s status) serving() bool {
	return s.Role == "leader" && (s.Raft == nil || (s.Raft.Serving && s.Raft.HasISR))
}

var statusClient = &http.Client{Timeout: 2 * time.Second}

func (c *Cluster) status(r *replica) (status, error) {
	var st status
	req, err := http.NewRequest(http.MethodGet, "http://"+r.replAddr()+"/replication/status", nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+groupToken)
	resp, err := statusClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /replication/status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// servingLeader returns the running replica that says it serves as leader
// (the highest epoch if, for a moment, two do), or nil.
func (c *Cluster) servingLeader() (*replica, status) {
	var best *replica
	var bestSt status
	for _, r := range c.replicas {
		if !r.running() {
			continue
		}
		st, err := c.status(r)
		if err != nil || !st.serving() {
			continue
		}
		if best == nil || st.Epoch > bestSt.Epoch {
			best, bestSt = r, st
		}
	}
	return best, bestSt
}

// describe summarises every replica's state for a failure message.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, r := range c.replicas {
		if !r.running() {
			fmt.Fprintf(&b, "[%d: down] ", r.id)
			continue
		}
		if len(c.replicas) == 1 {
			fmt.Fprintf(&b, "[%d: running] ", r.id)
			continue
		}
		st, err := c.status(r)
		if err != nil {
			fmt.Fprintf(&b, "[%d: %v] ", r.id, err)
			continue
		}
		fmt.Fprintf(&b, "[%d: %s epoch=%d isr=%v", r.id, st.Role, st.Epoch, st.ISR)
		if st.Raft != nil {
			fmt.Fprintf(&b, " raft=%s serving=%v has_isr=%v term=%d", st.Raft.Role, st.Raft.Serving, st.Raft.HasISR, st.Raft.Term)
		}
		b.WriteString("] ")
	}
	return strings.TrimSpace(b.String())
}

// Leader waits up to within for a running replica that serves clients as
// leader and returns its id; a single node is its own leader.
func (c *Cluster) Leader(within time.Duration) int {
	c.t.Helper()
	id := 0
	poll(within, func() bool {
		if len(c.replicas) == 1 {
			if c.replicas[0].running() {
				id = 1
			}
		} else if r, _ := c.servingLeader(); r != nil {
			id = r.id
		}
		return id != 0
	})
	if id == 0 {
		c.t.Fatalf("testenv: no serving leader within %v: %s", within, c.describe())
	}
	return id
}

// WaitHealthy waits up to within until every replica runs and answers
// Metadata, a leader serves, and (in a group) that leader reports every
// replica in the committed ISR, as after a fresh start: a restarted
// replica is back in the ISR only once it has caught up.
func (c *Cluster) WaitHealthy(within time.Duration) {
	c.t.Helper()
	all := make([]int32, len(c.replicas))
	for i, r := range c.replicas {
		all[i] = int32(r.id)
	}
	var why string
	ok := poll(within, func() bool {
		for _, r := range c.replicas {
			if !r.running() {
				// Nothing brings a dead replica back but Start.
				why = r.name + " is not running"
				return true
			}
			if err := metadata(r.clientAddr(), 2*time.Second, c.opts...); err != nil {
				why = fmt.Sprintf("%s: Metadata: %v", r.name, err)
				return false
			}
		}
		if len(c.replicas) == 1 {
			why = ""
			return true
		}
		l, st := c.servingLeader()
		if l == nil {
			why = "no serving leader: " + c.describe()
			return false
		}
		isr := slices.Clone(st.ISR)
		slices.Sort(isr)
		if !slices.Equal(isr, all) {
			why = fmt.Sprintf("leader %d reports ISR %v: %s", l.id, st.ISR, c.describe())
			return false
		}
		why = ""
		return true
	})
	if !ok || why != "" {
		c.t.Fatalf("testenv: cluster not healthy within %v: %s", within, why)
	}
}
