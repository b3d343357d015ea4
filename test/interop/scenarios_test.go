package interop

// The client × scenario matrix of docs/COMPATIBILITY.md. Every client runs
// the same scenario program (a driver, in its own language): create the
// topic with its admin client, produce N records idempotently with
// acks=all, printing each acknowledged value, then read the topic in a
// consumer group with commits, printing each value read, until every
// acknowledged one was read. The Go side starts real moonmq processes
// (internal/testcluster), hands the driver the bootstrap list of the
// scenario, kills the leader with SIGKILL in the failover scenario, and
// judges: every acknowledged record is stored exactly once (idempotence
// across retries and the failover) and was read by the group.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// scenario is one column of the matrix.
type scenario struct {
	name     string
	replicas int
	// follower: bootstrap with one follower only (what a Kubernetes
	// Service in front of the replicas gives a client).
	follower bool
	// kill: SIGKILL the leader once a third of the records are
	// acknowledged.
	kill bool
	// groups > 1 runs cluster mode: that many groups of replicas each,
	// the client bootstrapped with one follower of the last group, and
	// the kill (if any) is of the first group's leader.
	groups int
	// move (cluster mode): once two thirds of the records are
	// acknowledged, partition 0 moves to another group while the client
	// goes on producing.
	move bool
}

var scenarios = []scenario{
	{name: "single"},
	{name: "group", replicas: 3},
	{name: "follower", replicas: 3, follower: true},
	{name: "failover", replicas: 3, kill: true},
	{name: "cluster", replicas: 3, groups: 2, follower: true, kill: true, move: true},
}

// driver starts one client's scenario program; it writes the JSON lines
// to out and returns when the program ends.
type driver struct {
	name string
	// atLeastOnce: the client has no idempotent producer, so a retry
	// across the failover may store a record twice.
	atLeastOnce bool
	// checks are the {"check": NAME} lines the driver must print (its
	// admin calls that worked).
	checks []string
	// groupReadsTxn: the driver's read_committed group consumer reads the
	// transactions it wrote: every committed value, no aborted one.
	groupReadsTxn bool
	// run is the driver; unavailable says why it cannot run here.
	run func(t *testing.T, ctx context.Context, args []string, out io.Writer) error
}

func execDriver(bin string, pre ...string) func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
	return func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		cmd := exec.CommandContext(ctx, bin, append(slices.Clone(pre), args...)...)
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = out, &stderr
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		err := cmd.Run()
		if s := strings.TrimSpace(stderr.String()); s != "" {
			if len(s) > 6000 {
				s = "..." + s[len(s)-6000:]
			}
			t.Logf("%s stderr:\n%s", bin, s)
		}
		return err
	}
}

// kafkajsDir is the npm project of the kafkajs driver; .ci/run installs
// its node_modules (npm ci).
func kafkajsDriver(t *testing.T) driver {
	dir, _ := filepath.Abs("../kafkajs")
	node, err := exec.LookPath("node")
	why := ""
	switch {
	case err != nil:
		why = "node is not installed"
	default:
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs")); err != nil {
			why = "kafkajs is not installed (cd test/kafkajs && npm ci)"
		}
	}
	if why != "" {
		return driver{name: "kafkajs", run: func(t *testing.T, _ context.Context, _ []string, _ io.Writer) error {
			if os.Getenv("MOONMQ_REQUIRE_KAFKAJS") == "1" {
				t.Fatalf("MOONMQ_REQUIRE_KAFKAJS=1 but %s", why)
			}
			t.Skip(why)
			return nil
		}}
	}
	return driver{name: "kafkajs", checks: []string{"transactions"}, groupReadsTxn: true,
		run: execDriver(node, filepath.Join(dir, "scenario.js"))}
}

func javaDriver(protocol string) driver {
	name := "java"
	if protocol == "consumer" {
		name = "java-kip848"
	}
	checks := []string{"transactions", "configs", "list_groups", "group_offsets", "alter_group_offsets", "describe_producers",
		"list_transactions", "describe_transactions", "scram_users", "acls"}
	return driver{name: name, checks: checks, run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		javaBin, cp := javaProject(t)
		return execDriver(javaBin, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp", cp, "io.moonmq.interop.Scenario")(t, ctx, append(args, protocol), out)
	}}
}

func rdkafkaDriver() driver {
	return driver{name: "librdkafka", run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		return execDriver(python(t), "testdata/scenario_rdkafka.py")(t, ctx, args, out)
	}}
}

// franzDriver is the scenario with franz-go, in process.
func franzDriver() driver {
	return driver{name: "franz-go", run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		seeds, topic, group := strings.Split(args[0], ","), args[1], args[2]
		n, _ := strconv.Atoi(args[3])
		rf, _ := strconv.Atoi(args[4])
		var mu sync.Mutex
		emit := func(k, v string) {
			mu.Lock()
			defer mu.Unlock()
			b, _ := json.Marshal(map[string]string{k: v})
			fmt.Fprintf(out, "%s\n", b)
		}
		var errs []string
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.RecordDeliveryTimeout(2*time.Minute))
		if err != nil {
			return err
		}
		defer cl.Close()
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, int16(rf), nil, topic); err != nil && !strings.Contains(err.Error(), kerr.TopicAlreadyExists.Message) {
			return err
		}
		acked := map[string]bool{}
		var wg sync.WaitGroup
		for i := range n {
			v := fmt.Sprintf("franz-%d", i)
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: []byte(v)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("send %s: %v", v, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[v] = true
				mu.Unlock()
				emit("acked", v)
			})
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			return err
		}
		defer cons.Close()
		seen := map[string]bool{}
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			missing := false
			for v := range acked {
				if !seen[v] {
					missing = true
					break
				}
			}
			if !missing {
				break
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cons.PollFetches(pctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true; emit("consumed", string(r.Value)) })
			if err := cons.CommitUncommittedOffsets(ctx); err != nil {
				errs = append(errs, "commit: "+err.Error())
			}
		}
		b, _ := json.Marshal(map[string]any{"done": true, "client": "franz-go", "errors": errs})
		mu.Lock()
		fmt.Fprintf(out, "%s\n", b)
		mu.Unlock()
		return nil
	}}
}

// scenarioResult is what a driver printed.
type scenarioResult struct {
	acked, consumed map[string]int
	// txnCommitted and txnAborted are the values of transactions the
	// client committed and aborted; checks the admin calls that worked.
	txnCommitted, txnAborted, checks map[string]bool
	done                             bool
	client                           string
	errors                           []string
	fatal                            string
}

// lineSink parses a driver's JSON lines as they come and calls onAcked
// with the running count of acknowledgements.
type lineSink struct {
	mu      sync.Mutex
	res     scenarioResult
	pw      *io.PipeWriter
	done    chan struct{}
	onAcked func(n int)
}

func newLineSink(onAcked func(int)) *lineSink {
	pr, pw := io.Pipe()
	s := &lineSink{pw: pw, done: make(chan struct{}), onAcked: onAcked,
		res: scenarioResult{acked: map[string]int{}, consumed: map[string]int{},
			txnCommitted: map[string]bool{}, txnAborted: map[string]bool{}, checks: map[string]bool{}}}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue // a client's own chatter
			}
			s.mu.Lock()
			if v, ok := m["acked"].(string); ok {
				s.res.acked[v]++
				n := len(s.res.acked)
				s.mu.Unlock()
				s.onAcked(n)
				continue
			}
			if v, ok := m["consumed"].(string); ok {
				s.res.consumed[v]++
			}
			if v, ok := m["txn_committed"].(string); ok {
				s.res.txnCommitted[v] = true
			}
			if v, ok := m["txn_aborted"].(string); ok {
				s.res.txnAborted[v] = true
			}
			if v, ok := m["check"].(string); ok {
				s.res.checks[v] = true
			}
			if m["done"] == true {
				s.res.done = true
				s.res.client, _ = m["client"].(string)
				s.res.fatal, _ = m["fatal"].(string)
				if es, ok := m["errors"].([]any); ok {
					for _, e := range es {
						s.res.errors = append(s.res.errors, fmt.Sprint(e))
					}
				}
			}
			s.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return s
}

func (s *lineSink) Write(p []byte) (int, error) { return s.pw.Write(p) }

func (s *lineSink) result() scenarioResult {
	_ = s.pw.Close()
	<-s.done
	return s.res
}

// scenarioCluster starts the processes of sc and returns them, the
// leader (with every replica in the ISR) and the bootstrap list the
// client gets: every replica, or one follower only.
func scenarioCluster(t *testing.T, sc scenario) (*testcluster.Cluster, *testcluster.Replica, []string) {
	t.Helper()
	replicas := max(sc.replicas, 1)
	if sc.groups > 1 {
		return clusterScenario(t, sc)
	}
	c := testcluster.Start(t, testcluster.WithReplicas(replicas))
	leader := c.Replicas[0]
	if replicas > 1 {
		leader = c.WaitISR(90*time.Second, 1, 2, 3)
	}
	var bootstrap []string
	for _, r := range c.Replicas {
		if sc.follower && r != leader {
			return c, leader, []string{r.ClientAddr()}
		}
		if !sc.follower {
			bootstrap = append(bootstrap, r.ClientAddr())
		}
	}
	return c, leader, bootstrap
}

// clusterScenario starts sc.groups groups in cluster mode, waits until
// every group serves with its whole ISR and every broker's Metadata lists
// all of them, and returns the cluster, the first group's leader and one
// follower of the last group as the client's only bootstrap broker.
func clusterScenario(t *testing.T, sc scenario) (*testcluster.Cluster, *testcluster.Replica, []string) {
	c := testcluster.Start(t, testcluster.WithReplicas(sc.replicas), testcluster.WithGroups(sc.groups))
	var leaders []*testcluster.Replica
	c.WaitFor(90*time.Second, "every group serving with its whole ISR", func() (bool, string) {
		leaders = leaders[:0]
		for g := range sc.groups {
			l, st := c.ServingLeaderOf(g)
			if l == nil || len(st.ISR) != sc.replicas {
				return false, fmt.Sprintf("group %d: leader %v ISR %v", g+1, l, st.ISR)
			}
			leaders = append(leaders, l)
		}
		return true, ""
	})
	c.WaitFor(60*time.Second, "every broker listing every broker", func() (bool, string) {
		for _, r := range c.Replicas {
			cl, err := kgo.NewClient(kgo.SeedBrokers(r.ClientAddr()))
			if err != nil {
				return false, err.Error()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			bs, err := kadm.NewClient(cl).ListBrokers(ctx)
			cancel()
			cl.Close()
			if err != nil || len(bs) != len(c.Replicas) {
				return false, fmt.Sprintf("replica %d lists %d brokers: %v", r.ID, len(bs), err)
			}
		}
		return true, ""
	})
	for _, r := range c.InGroup(sc.groups - 1) {
		if r != leaders[sc.groups-1] {
			return c, leaders[0], []string{r.ClientAddr()}
		}
	}
	t.Fatal("no follower in the last group")
	return nil, nil, nil
}

// scenarioRecords is how many records each driver produces.
const scenarioRecords = 300

// runScenario runs one cell of the matrix.
func runScenario(t *testing.T, d driver, sc scenario) {
	c, leader, bootstrap := scenarioCluster(t, sc)
	replicas := len(c.Replicas)
	if sc.groups > 1 {
		replicas = sc.replicas // the replication factor is a group's size
	}
	topic, group := "matrix-"+d.name+"-"+sc.name, "matrix-g-"+d.name+"-"+sc.name
	if sc.groups > 1 {
		// The consumer group is coordinated in the group whose leader
		// is killed, not in the bootstrap broker's: the client finds
		// its coordinator in another group and follows it through
		// that group's failover.
		group = c.KeyCoordinatedIn(0, group, leader.Group)
	}
	var killOnce, moveOnce sync.Once
	killed := make(chan struct{})
	moveStarted, moved := make(chan struct{}), make(chan error, 1)
	sink := newLineSink(func(n int) {
		if sc.move && n >= scenarioRecords*2/3 {
			moveOnce.Do(func() {
				close(moveStarted)
				go func() { moved <- moveToOtherGroup(t, c, topic, 0) }()
			})
		}
		if sc.kill && n >= scenarioRecords/3 {
			killOnce.Do(func() {
				// Whoever serves now, not who served at the start.
				if r, _ := c.ServingLeaderOf(leader.Group); r != nil {
					leader = r
				}
				t.Logf("SIGKILL of the leader, replica %d, after %d acknowledgements", leader.ID, n)
				leader.Kill()
				close(killed)
			})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	err := d.run(t, ctx, []string{strings.Join(bootstrap, ","), topic, group, strconv.Itoa(scenarioRecords), strconv.Itoa(replicas)}, sink)
	res := sink.result()
	t.Logf("%s, scenario %s: %d acknowledged, %d distinct consumed, in %v; client errors: %v",
		res.client, sc.name, len(res.acked), len(res.consumed), time.Since(start).Round(time.Millisecond), res.errors)
	if err != nil || !res.done || res.fatal != "" {
		t.Fatalf("the %s driver failed: %v %s", d.name, err, res.fatal)
	}
	if sc.kill {
		select {
		case <-killed:
		default:
			t.Fatalf("the leader was never killed: %d acknowledged", len(res.acked))
		}
	}
	if sc.move {
		select {
		case <-moveStarted:
		default:
			t.Fatalf("partition 0 was never moved: %d acknowledged", len(res.acked))
		}
		if err := <-moved; err != nil {
			t.Fatalf("moving partition 0 of %s: %v", topic, err)
		}
	}
	// Without a failover every record is acknowledged; with one, records
	// in flight at the kill may fail, but most must get through.
	if want := scenarioRecords; !sc.kill && len(res.acked) != want || sc.kill && len(res.acked) < want*2/3 {
		t.Fatalf("%d of %d records acknowledged", len(res.acked), scenarioRecords)
	}
	for v, k := range res.acked {
		if k != 1 {
			t.Fatalf("%s acknowledged %d times", v, k)
		}
		if res.consumed[v] == 0 {
			t.Fatalf("acknowledged %s never read by the group", v)
		}
	}
	// Stored exactly once, read back from the log with franz-go.
	stored := readAll(t, c, topic)
	dups := 0
	for v := range res.acked {
		if stored[v] == 0 {
			t.Fatalf("acknowledged %s is not stored", v)
		}
	}
	for v, k := range stored {
		if k > 1 {
			dups++
			if !d.atLeastOnce || !sc.kill {
				t.Fatalf("%s stored %d times (an idempotent producer must not duplicate, nor any producer without a failover)", v, k)
			}
		}
	}
	for v := range res.txnCommitted {
		if stored[v] != 1 {
			t.Fatalf("committed transactional record %s read %d times by read_committed", v, stored[v])
		}
	}
	for v := range res.txnAborted {
		if stored[v] != 0 {
			t.Fatalf("aborted transactional record %s read by read_committed", v)
		}
	}
	if d.groupReadsTxn {
		for v := range res.txnCommitted {
			if res.consumed[v] == 0 {
				t.Fatalf("the read_committed group never read committed transactional record %s", v)
			}
		}
		for v := range res.txnAborted {
			if res.consumed[v] != 0 {
				t.Fatalf("the read_committed group read aborted transactional record %s", v)
			}
		}
	}
	for _, c := range d.checks {
		if !res.checks[c] {
			t.Fatalf("the %s driver's %s check did not pass (errors: %v)", d.name, c, res.errors)
		}
	}
	if dups > 0 {
		t.Logf("%d records stored twice by a retry across the failover (the client has no idempotent producer)", dups)
	}
}

// readAll reads every record of topic from the start to the end offsets.
func readAll(t *testing.T, c *testcluster.Cluster, topic string) map[string]int {
	t.Helper()
	var up []string
	for _, r := range c.Up() {
		up = append(up, r.ClientAddr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(up...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	out := map[string]int{}
	got := map[int32]int64{}
	// A partition ends in transaction markers and aborted records that a
	// read_committed consumer never returns: done when every partition
	// reached its end or nothing more came for three seconds.
	quiet := time.Now()
	for {
		doneAll := true
		for p, end := range want {
			if got[p] < end {
				doneAll = false
			}
		}
		if doneAll || time.Since(quiet) > 3*time.Second {
			return out
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: got %v of %v", topic, got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[string(r.Value)]++
			got[r.Partition] = r.Offset + 1
			quiet = time.Now()
		})
	}
}

// matrixDrivers lists every client of the matrix, in its order.
func matrixDrivers(t *testing.T) []driver {
	return []driver{franzDriver(), rdkafkaDriver(), javaDriver("classic"), javaDriver("consumer"), kafkajsDriver(t),
		saramaDriver(), kafkaGoDriver(), kafkaPythonDriver(), kcatDriver()}
}

// kcatDriver is kcat (librdkafka's command line) through a small Python
// wrapper that turns its runs into the scenario's lines. kcat has no
// admin command: the topic comes from auto-creation, and the replication
// factor from the broker's default.
func kcatDriver() driver {
	return driver{name: "kcat", run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		t.Setenv("KCAT", kcatPath(t))
		return execDriver("/usr/bin/python3", "testdata/scenario_kcat.py")(t, ctx, args, out)
	}}
}

func kafkaPythonDriver() driver {
	return driver{name: "kafka-python", atLeastOnce: true, run: func(t *testing.T, ctx context.Context, args []string, out io.Writer) error {
		return execDriver(kafkaPythonInterpreter(t), "testdata/scenario_kafkapython.py")(t, ctx, args, out)
	}}
}

// TestClientScenarios runs every client through every scenario.
func TestClientScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and every client: not in -short")
	}
	for _, d := range matrixDrivers(t) {
		t.Run(d.name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) { runScenario(t, d, sc) })
			}
		})
	}
}

// moveToOtherGroup moves partition part of topic to a group other than
// its owner (AlterPartitionReassignments, retried while the cluster
// answers with retriable errors) and waits until the move is over and that
// group's leader leads it.
func moveToOtherGroup(t *testing.T, c *testcluster.Cluster, topic string, part int32) error {
	adm := c.Admin()
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var target int
	var replicas []int32
	for {
		md, err := adm.Metadata(ctx, topic)
		if p, ok := md.Topics[topic].Partitions[part]; err == nil && ok && p.Leader >= 0 {
			groups := 0
			for _, r := range c.Replicas {
				groups = max(groups, r.Group+1)
			}
			target = (c.Replica(int(p.Leader)).Group + 1) % groups
			for _, r := range c.InGroup(target) {
				replicas = append(replicas, int32(r.ID))
			}
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no leader of %s/%d: %v", topic, part, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign(topic, part, replicas)
		resps, err := adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			for _, r := range resps.Sorted() {
				err = r.Err
			}
		}
		if err == nil {
			break
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			return fmt.Errorf("start the move to g%d: %w", target+1, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("moving %s/%d to g%d", topic, part, target+1)
	for {
		listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {part: struct{}{}}})
		md, merr := adm.Metadata(ctx, topic)
		if err == nil && merr == nil {
			_, moving := listed[topic][part]
			p := md.Topics[topic].Partitions[part]
			if !moving && p.Leader >= 0 && c.Replica(int(p.Leader)).Group == target {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the move to g%d did not finish: %v %v", target+1, err, merr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
