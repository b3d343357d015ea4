// Command failoverbench measures failover time of a three-replica MoonMQ
// group in failover mode: the time from a SIGKILL of the serving leader to the
// first acks=all produce acknowledged by the new leader. It starts three
// `moonmq serve --config` processes on loopback, produces one record at a
// time with a franz-go client seeded with all three client addresses, kills
// the current leader N times (restarting the killed replica and waiting until
// it is back in the ISR before the next kill), and at the end reads the topic
// back from the final leader and checks that every acknowledged value is
// present exactly once. See docs/BENCHMARKS.md, "Failover time".
//
//	go run ./cmd/failoverbench --kills 20            # builds moonmq from ../
//	go run ./cmd/failoverbench --moonmq /path/moonmq
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
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

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var all []*replica

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "failoverbench: "+format+"\n", a...)
	for _, r := range all {
		r.kill9()
	}
	os.Exit(1)
}

// serving returns the replica that is the serving leader with an ISR,
// skipping the one with id not, or nil after within.
func serving(not int32, within time.Duration) *replica {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, r := range all {
			if r.id == not {
				continue
			}
			if st := r.status(); st != nil && st.Role == "leader" && st.Raft != nil && st.Raft.Serving && st.Raft.HasISR {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// acked is what the producer has had acknowledged.
type ackLog struct {
	mu     sync.Mutex
	values map[string]int64 // value -> offset
	byOff  map[int64]string // offset -> value
	n      int
	// per-node time of the latest acknowledged batch
	lastAck map[int32]time.Time
	// first acknowledgement by a node other than watchNot after watchFrom
	watchFrom time.Time
	watchNot  int32
	firstAck  time.Time
	firstNode int32
}

func (a *ackLog) OnProduceBatchWritten(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.ProduceBatchMetrics) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastAck[meta.NodeID] = now
	if !a.watchFrom.IsZero() && a.firstAck.IsZero() && meta.NodeID != a.watchNot && now.After(a.watchFrom) {
		a.firstAck, a.firstNode = now, meta.NodeID
	}
}

func (a *ackLog) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func main() {
	bin := flag.String("moonmq", "", "moonmq binary (default: build github.com/moonmq/moonmq/cmd/moonmq)")
	kills := flag.Int("kills", 20, "number of leader kills")
	backoff := flag.Duration("backoff", 20*time.Millisecond, "producer retry backoff")
	workDir := flag.String("workdir", "", "directory for data and logs (default: a temporary one, removed on success)")
	isrLag := flag.Int("isr-lag-seconds", 1, "Replication.IsrLagSeconds")
	ackTimeout := flag.Int("ack-timeout", 2, "Replication.AckTimeout (seconds)")
	flag.Parse()

	dir := *workDir
	keep := dir != ""
	if dir == "" {
		d, err := os.MkdirTemp("", "failoverbench")
		if err != nil {
			fatalf("%v", err)
		}
		dir = d
	}
	if *bin == "" {
		*bin = filepath.Join(dir, "moonmq")
		fmt.Printf("building moonmq into %s\n", *bin)
		out, err := exec.Command("go", "build", "-o", *bin, "github.com/moonmq/moonmq/cmd/moonmq").CombinedOutput()
		if err != nil {
			fatalf("build moonmq: %v\n%s", err, out)
		}
	}

	all = make([]*replica, 3)
	for i := range all {
		r := &replica{id: int32(i + 1), port: freePort(), mport: freePort(), replicate: freePort()}
		r.dataDir = filepath.Join(dir, fmt.Sprintf("r%d", r.id))
		r.logf = filepath.Join(dir, fmt.Sprintf("r%d.log", r.id))
		if err := os.MkdirAll(r.dataDir, 0o755); err != nil {
			fatalf("%v", err)
		}
		all[i] = r
	}
	for _, r := range all {
		var peers []string
		for _, o := range all {
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
			r.port, r.mport, r.dataDir, r.id, role, r.replicate, r.port, token, *ackTimeout, *isrLag, strings.Join(peers, ", "))
		r.config = filepath.Join(dir, fmt.Sprintf("r%d.json", r.id))
		if err := os.WriteFile(r.config, []byte(cfg), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	for _, r := range all {
		if err := r.start(*bin); err != nil {
			fatalf("%v", err)
		}
	}
	defer func() {
		for _, r := range all {
			r.kill9()
		}
	}()
	leader := serving(0, 30*time.Second)
	if leader == nil {
		fatalf("no serving leader within 30s")
	}
	fmt.Printf("replica %d serves; work dir %s\n", leader.id, dir)
	startTerm := uint64(0)
	if st := leader.status(); st != nil && st.Raft != nil {
		startTerm = st.Raft.Term
	}

	const topic = "failover"
	acks := &ackLog{values: map[string]int64{}, byOff: map[int64]string{}, lastAck: map[int32]time.Time{}}
	seeds := []string{all[0].clientAddr(), all[1].clientAddr(), all[2].clientAddr()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(50*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return *backoff }),
		kgo.RetryTimeout(60*time.Second),
		kgo.WithHooks(acks))
	if err != nil {
		fatalf("client: %v", err)
	}
	defer cl.Close()
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = kadm.NewClient(cl).CreateTopic(cctx, 1, 3, nil, topic)
	cancel()
	if err != nil {
		fatalf("create topic: %v", err)
	}

	var dupAck string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprintf("v%d", i)
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			r, err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).First()
			cancel()
			if err != nil {
				continue
			}
			acks.mu.Lock()
			if ov, ok := acks.byOff[r.Offset]; ok && dupAck == "" {
				dupAck = fmt.Sprintf("offset %d acknowledged for %q and %q", r.Offset, ov, v)
			}
			acks.values[v] = r.Offset
			acks.byOff[r.Offset] = v
			acks.n++
			acks.mu.Unlock()
		}
	}()
	waitAcks := func(n int, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for acks.count() < n {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(10 * time.Millisecond)
		}
		return true
	}
	if !waitAcks(50, 30*time.Second) {
		fatalf("only %d records acknowledged before the first kill", acks.count())
	}

	var times, serves []time.Duration
	failures := 0
	start := time.Now()
	for k := 1; k <= *kills; k++ {
		leader = serving(0, 30*time.Second)
		if leader == nil {
			fatalf("kill %d: no serving leader", k)
		}
		// Produce flows through the current leader before the kill.
		if !waitAcks(acks.count()+20, 30*time.Second) {
			fatalf("kill %d: produce stalled before the kill", k)
		}
		acks.mu.Lock()
		acks.firstAck, acks.firstNode = time.Time{}, 0
		acks.watchNot = leader.id
		killedAt := time.Now()
		acks.watchFrom = killedAt
		acks.mu.Unlock()
		leader.kill9()

		var took, servedAfter time.Duration
		var newNode int32
		deadline := killedAt.Add(60 * time.Second)
		for {
			if servedAfter == 0 {
				for _, r := range all {
					if r == leader {
						continue
					}
					if st := r.status(); st != nil && st.Role == "leader" && st.Raft != nil && st.Raft.Serving {
						servedAfter = time.Since(killedAt)
					}
				}
			}
			acks.mu.Lock()
			fa, fn := acks.firstAck, acks.firstNode
			acks.mu.Unlock()
			if !fa.IsZero() {
				took, newNode = fa.Sub(killedAt), fn
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if newNode == 0 {
			failures++
			fmt.Printf("kill %2d: killed replica %d; NO acknowledgement within 60s\n", k, leader.id)
		} else {
			times = append(times, took)
			if servedAfter > 0 {
				serves = append(serves, servedAfter)
			}
			fmt.Printf("kill %2d: killed replica %d; replica %d serving after %v, acknowledged after %v (acked so far %d)\n",
				k, leader.id, newNode, servedAfter.Round(time.Millisecond), took.Round(time.Millisecond), acks.count())
		}

		// Restart the killed replica and wait until it follows and is back in the ISR.
		if err := leader.start(*bin); err != nil {
			fatalf("kill %d: restart: %v", k, err)
		}
		rejoinBy := time.Now().Add(60 * time.Second)
		for {
			cur := serving(leader.id, 10*time.Second)
			st := leader.status()
			if cur != nil && st != nil && st.Role == "follower" && st.Leader == cur.id && len(st.Follower) > 0 {
				if cs := cur.status(); cs != nil && cs.Raft != nil && slices.Contains(cs.Raft.ISR, leader.id) && len(cs.Raft.ISR) == 3 {
					break
				}
			}
			if time.Now().After(rejoinBy) {
				fatalf("kill %d: replica %d did not rejoin the ISR within 60s", k, leader.id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !waitAcks(acks.count()+20, 30*time.Second) {
		fatalf("produce stalled after the last kill")
	}
	close(stop)
	<-done
	elapsed := time.Since(start)

	// Read everything back from the final leader.
	final := serving(0, 30*time.Second)
	if final == nil {
		fatalf("no serving leader at the end")
	}
	acks.mu.Lock()
	values := acks.values
	acks.mu.Unlock()
	var maxOff int64 = -1
	for _, off := range values {
		maxOff = max(maxOff, off)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(final.clientAddr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		fatalf("consumer: %v", err)
	}
	defer cons.Close()
	seen := map[string]int{}
	gotOff := map[string]int64{}
	last := int64(-1)
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	for last < maxOff && rctx.Err() == nil {
		fs := cons.PollFetches(rctx)
		fs.EachRecord(func(r *kgo.Record) {
			last = max(last, r.Offset)
			seen[string(r.Value)]++
			gotOff[string(r.Value)] = r.Offset
		})
	}
	lost, dup, moved := 0, 0, 0
	for v, off := range values {
		switch n := seen[v]; {
		case n == 0:
			lost++
		case n > 1:
			dup++
		case gotOff[v] != off:
			moved++
		}
	}

	slices.Sort(times)
	slices.Sort(serves)
	fmt.Println()
	fmt.Printf("failover time over %d kills (SIGKILL of the serving leader -> first acks=all ack by the new leader):\n", len(times))
	if len(times) > 0 {
		med := median(times)
		fmt.Printf("  min %v  median %v  max %v\n", times[0].Round(time.Millisecond), med.Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
		fmt.Printf("  targets: median < 1.5s: %v; max < 3s: %v\n", med < 1500*time.Millisecond, times[len(times)-1] < 3*time.Second)
	}
	if len(serves) > 0 {
		fmt.Printf("  of which until the new leader reports serving (status polled): median %v  max %v\n",
			median(serves).Round(time.Millisecond), serves[len(serves)-1].Round(time.Millisecond))
	}
	fmt.Printf("  kills without an ack within 60s: %d\n", failures)
	if st := final.status(); st != nil && st.Raft != nil {
		// One election per kill; anything more is an election nobody
		// asked for (a missed heartbeat) or a leadership hand-off.
		fmt.Printf("  Raft terms: %d at the first kill, %d at the end: %d elections for %d kills\n",
			startTerm, st.Raft.Term, st.Raft.Term-startTerm, *kills)
	}
	fmt.Printf("acknowledged records: %d (read back up to offset %d of %d)\n", len(values), last, maxOff)
	fmt.Printf("  lost: %d  duplicated: %d  at another offset: %d\n", lost, dup, moved)
	if dupAck != "" {
		fmt.Printf("  offset acknowledged twice: %s\n", dupAck)
	}
	fmt.Printf("total run time %v\n", elapsed.Round(time.Second))
	for _, r := range all {
		r.kill9()
	}
	if lost > 0 || dup > 0 || moved > 0 || failures > 0 || dupAck != "" {
		fmt.Printf("FAIL (logs in %s)\n", dir)
		os.Exit(1)
	}
	if !keep {
		os.RemoveAll(dir)
	}
}

// median of sorted, non-empty d.
func median(d []time.Duration) time.Duration {
	if len(d)%2 == 0 {
		return (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return d[len(d)/2]
}
