package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
)

const token = "tok"

// moonmqGroup is a three-replica MoonMQ group in failover mode, each
// replica a `moonmq serve` process; /replication/status says who serves.
type moonmqGroup struct {
	bin string
	rs  []*replica
}

type replica struct {
	id                     int32
	port, mport, replicate int
	dataDir, config, logf  string
	cmd                    *exec.Cmd
}

func (r *replica) clientAddr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

type raftStatus struct {
	Serving bool    `json:"serving"`
	HasISR  bool    `json:"has_isr"`
	ISR     []int32 `json:"isr"`
	Term    uint64  `json:"raft_term"`
}

type status struct {
	Role     string          `json:"role"`
	Leader   int32           `json:"leader"`
	Raft     *raftStatus     `json:"raft"`
	Follower json.RawMessage `json:"follower"`
}

var httpc = &http.Client{Timeout: time.Second}

func (r *replica) status() *status {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/replication/status", r.replicate), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st status
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	return &st
}

// start runs the replica's process and waits for its "moonmq serving" line.
func (r *replica) start(bin string) error {
	lf, err := os.OpenFile(r.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	r.cmd = exec.Command(bin, "serve", "--config", r.config)
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		return err
	}
	r.cmd.Stdout = lf
	if err := r.cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	go func() {
		defer lf.Close()
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(lf, sc.Text())
			if strings.Contains(sc.Text(), "moonmq serving") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("replica %d did not start within 30s (log %s)", r.id, r.logf)
	}
}

func (r *replica) kill9() {
	if r.cmd != nil && r.cmd.ProcessState == nil {
		r.cmd.Process.Signal(syscall.SIGKILL)
		r.cmd.Wait()
	}
}

// newMoonMQGroup writes the three replicas' configs under dir and starts
// them.
func newMoonMQGroup(bin, dir string, isrLag, ackTimeout int) (*moonmqGroup, error) {
	g := &moonmqGroup{bin: bin, rs: make([]*replica, 3)}
	for i := range g.rs {
		r := &replica{id: int32(i + 1), port: freePort(), mport: freePort(), replicate: freePort()}
		r.dataDir = filepath.Join(dir, fmt.Sprintf("r%d", r.id))
		r.logf = filepath.Join(dir, fmt.Sprintf("r%d.log", r.id))
		if err := os.MkdirAll(r.dataDir, 0o755); err != nil {
			return nil, err
		}
		g.rs[i] = r
	}
	for _, r := range g.rs {
		var peers []string
		for _, o := range g.rs {
			if o != r {
				peers = append(peers, fmt.Sprintf(`{"Id": %d, "Address": "127.0.0.1:%d", "ClientAddress": "127.0.0.1:%d"}`, o.id, o.replicate, o.port))
			}
		}
		role := "follower"
		if r.id == 1 {
			role = "leader"
		}
		cfg := fmt.Sprintf(`{"Server": {"Host": "127.0.0.1", "Port": %d, "MetricsPort": %d, "DataDir": %q,
  "Replication": {"Enabled": true, "ReplicaId": %d, "Role": %q, "ReplicateHost": "127.0.0.1",
    "ReplicatePort": %d, "ClientAddress": "127.0.0.1:%d", "Token": %q, "AckTimeout": %d, "IsrLagSeconds": %d,
    "Peers": [%s], "Failover": {"Enabled": true}}}}`,
			r.port, r.mport, r.dataDir, r.id, role, r.replicate, r.port, token, ackTimeout, isrLag, strings.Join(peers, ", "))
		r.config = filepath.Join(dir, fmt.Sprintf("r%d.json", r.id))
		if err := os.WriteFile(r.config, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
	}
	for _, r := range g.rs {
		if err := r.start(bin); err != nil {
			g.stopAll()
			return nil, err
		}
	}
	return g, nil
}

func (g *moonmqGroup) name() string { return "MoonMQ" }

func (g *moonmqGroup) seeds() []string {
	var s []string
	for _, r := range g.rs {
		s = append(s, r.clientAddr())
	}
	return s
}

func (g *moonmqGroup) byID(id int32) *replica { return g.rs[id-1] }

// leaderNow is the replica that serves as leader with an ISR, skipping
// not; 0 when none does.
func (g *moonmqGroup) leaderNow(not int32) int32 {
	for _, r := range g.rs {
		if r.id == not {
			continue
		}
		if st := r.status(); st != nil && st.Role == "leader" && st.Raft != nil && st.Raft.Serving && st.Raft.HasISR {
			return r.id
		}
	}
	return 0
}

func (g *moonmqGroup) kill9(id int32) { g.byID(id).kill9() }

// createTopic creates the topic; the group's leader leads every partition.
func (g *moonmqGroup) createTopic(ctx context.Context, cl *kgo.Client, partitions int32) error {
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 3, nil, topic)
	if err == nil {
		err = resp.Err
	}
	return err
}

func (g *moonmqGroup) restart(id int32) error { return g.byID(id).start(g.bin) }

// rejoined: id follows the serving leader, which has all three in its ISR.
func (g *moonmqGroup) rejoined(id int32) bool {
	cur := g.leaderNow(id)
	st := g.byID(id).status()
	if cur == 0 || st == nil || st.Role != "follower" || st.Leader != cur || len(st.Follower) == 0 {
		return false
	}
	cs := g.byID(cur).status()
	return cs != nil && cs.Raft != nil && slices.Contains(cs.Raft.ISR, id) && len(cs.Raft.ISR) == 3
}

// elections is the Raft term, which one election moves by one.
func (g *moonmqGroup) elections() (uint64, bool) {
	l := g.leaderNow(0)
	if l == 0 {
		return 0, false
	}
	if st := g.byID(l).status(); st != nil && st.Raft != nil {
		return st.Raft.Term, true
	}
	return 0, false
}

func (g *moonmqGroup) stopAll() {
	for _, r := range g.rs {
		r.kill9()
	}
}
