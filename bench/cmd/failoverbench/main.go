// Command failoverbench measures failover time of a three-node group: the
// time from a SIGKILL of the node that leads every partition of the topic
// to the first acks=all produce acknowledged by another node, and with
// --partitions above one also to the first such acknowledgement on every
// partition. It starts three MoonMQ replicas in failover mode (`moonmq
// serve --config`), or with --system kafka three Apache Kafka KRaft nodes,
// on loopback (Kafka's topic gets the same replica list for every
// partition, so that one broker leads them all, as MoonMQ's group leader
// does); produces one record to every partition at a time with a franz-go
// client seeded with all three addresses; kills the current leader N times
// (restarting the killed node and waiting until it is back in the ISR
// before the next kill); and at the end reads the topic back and checks
// that every acknowledged value is present exactly once, where it was
// acknowledged. See docs/BENCHMARKS.md, "Failover time".
//
//	go run ./cmd/failoverbench --kills 20            # builds moonmq from ../
//	go run ./cmd/failoverbench --moonmq /path/moonmq --partitions 1000
//	go run ./cmd/failoverbench --system kafka --kafka-classpath FILE
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topic is the topic every kill is measured on, of numPartitions
// partitions (--partitions).
const topic = "failover"

var numPartitions int32 = 1

// system is the group under test: three nodes on loopback, ids 1 to 3,
// replicating the topic.
type system interface {
	name() string
	seeds() []string
	// leaderNow is the node that leads the topic and serves, skipping
	// not; 0 when there is none (yet).
	leaderNow(not int32) int32
	kill9(id int32)
	restart(id int32) error
	// rejoined reports whether id is back, following, and the ISR holds
	// all three nodes again.
	rejoined(id int32) bool
	// elections is a counter of leader elections, where the system has
	// one.
	elections() (uint64, bool)
	// createTopic creates the topic so that one node leads every
	// partition.
	createTopic(ctx context.Context, cl *kgo.Client, partitions int32) error
	stopAll()
}

var sys system

func freePort() int {
	p, err := freeport.Pick()
	if err != nil {
		fatalf("%v", err)
	}
	return p
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "failoverbench: "+format+"\n", a...)
	if sys != nil {
		sys.stopAll()
	}
	os.Exit(1)
}

// leader waits up to within for a leader other than not; 0 if none came.
func leader(not int32, within time.Duration) int32 {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if id := sys.leaderNow(not); id != 0 {
			return id
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// at is where a record was acknowledged.
type at struct {
	partition int32
	offset    int64
}

// acked is what the producer has had acknowledged.
type ackLog struct {
	mu     sync.Mutex
	values map[string]at // value -> where
	byAt   map[at]string // where -> value
	n      int
	// per-node time of the latest acknowledged batch
	lastAck map[int32]time.Time
	// first acknowledgement by a node other than watchNot after watchFrom,
	// and the partitions such acknowledgements have covered
	watchFrom time.Time
	watchNot  int32
	firstAck  time.Time
	firstNode int32
	covered   map[int32]bool
	allAck    time.Time // when covered came to hold every partition
}

func (a *ackLog) OnProduceBatchWritten(meta kgo.BrokerMetadata, _ string, partition int32, _ kgo.ProduceBatchMetrics) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastAck[meta.NodeID] = now
	if a.watchFrom.IsZero() || meta.NodeID == a.watchNot || !now.After(a.watchFrom) {
		return
	}
	if a.firstAck.IsZero() {
		a.firstAck, a.firstNode = now, meta.NodeID
	}
	if a.allAck.IsZero() {
		a.covered[partition] = true
		if len(a.covered) == int(numPartitions) {
			a.allAck = now
		}
	}
}

func (a *ackLog) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func main() {
	system := flag.String("system", "moonmq", "the group to measure: moonmq or kafka")
	bin := flag.String("moonmq", "", "moonmq binary (default: build github.com/moonmq/moonmq/cmd/moonmq)")
	java := flag.String("java", "java", "java binary (--system kafka)")
	kafkaCP := flag.String("kafka-classpath", "", "file holding Apache Kafka's classpath, as bench/kafka.sh resolves it (--system kafka)")
	kafkaExtra := flag.String("kafka-extra", "", "comma-separated server.properties lines added to Kafka's defaults, e.g. broker.session.timeout.ms=2500,broker.heartbeat.interval.ms=500")
	kills := flag.Int("kills", 20, "number of leader kills")
	partitions := flag.Int("partitions", 1, "partitions of the topic, all led by one node")
	jsonOut := flag.String("json", "", "also write the result as JSON to this file")
	label := flag.String("name", "", "label of this run in the JSON result (default: --system)")
	backoff := flag.Duration("backoff", 20*time.Millisecond, "producer retry backoff")
	workDir := flag.String("workdir", "", "directory for data and logs (default: a temporary one, removed on success)")
	isrLag := flag.Int("isr-lag-seconds", 1, "Replication.IsrLagSeconds")
	ackTimeout := flag.Int("ack-timeout", 2, "Replication.AckTimeout (seconds)")
	flag.Parse()
	if *partitions < 1 {
		fatalf("--partitions must be at least 1")
	}
	numPartitions = int32(*partitions)

	dir := *workDir
	keep := dir != ""
	if dir == "" {
		d, err := os.MkdirTemp("", "failoverbench")
		if err != nil {
			fatalf("%v", err)
		}
		dir = d
	}
	var err error
	switch *system {
	case "moonmq":
		if *bin == "" {
			*bin = filepath.Join(dir, "moonmq")
			fmt.Printf("building moonmq into %s\n", *bin)
			out, err := exec.Command("go", "build", "-o", *bin, "github.com/moonmq/moonmq/cmd/moonmq").CombinedOutput()
			if err != nil {
				fatalf("build moonmq: %v\n%s", err, out)
			}
		}
		var g *moonmqGroup
		if g, err = newMoonMQGroup(*bin, dir, *isrLag, *ackTimeout); err == nil {
			sys = g
		}
	case "kafka":
		var extra []string
		for _, kv := range strings.Split(*kafkaExtra, ",") {
			if kv = strings.TrimSpace(kv); kv != "" {
				extra = append(extra, kv)
			}
		}
		var g *kafkaGroup
		if g, err = newKafkaGroup(*java, *kafkaCP, dir, extra); err == nil {
			sys = g
		}
	default:
		fatalf("--system must be moonmq or kafka, got %q", *system)
	}
	if err != nil {
		fatalf("starting %s: %v", *system, err)
	}
	defer sys.stopAll()

	acks := &ackLog{values: map[string]at{}, byAt: map[at]string{}, lastAck: map[int32]time.Time{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(sys.seeds()...),
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
	// Until the group has a leader (MoonMQ) or a controller (Kafka) that
	// takes it.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := sys.createTopic(cctx, cl, numPartitions)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fatalf("create topic: %v", err)
		}
	}
	first := leader(0, 60*time.Second)
	if first == 0 {
		fatalf("no leader of %s within 60s", topic)
	}
	fmt.Printf("%s: node %d leads %s (%d partitions); work dir %s\n", sys.name(), first, topic, numPartitions, dir)
	startTerm, _ := sys.elections()

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
			rs := make([]*kgo.Record, numPartitions)
			for p := range rs {
				rs[p] = &kgo.Record{Partition: int32(p), Value: fmt.Appendf(nil, "v%d-%d", i, p)}
			}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			res := cl.ProduceSync(pctx, rs...)
			cancel()
			acks.mu.Lock()
			for _, r := range res {
				if r.Err != nil {
					continue
				}
				v, where := string(r.Record.Value), at{r.Record.Partition, r.Record.Offset}
				if ov, ok := acks.byAt[where]; ok && dupAck == "" {
					dupAck = fmt.Sprintf("partition %d offset %d acknowledged for %q and %q", where.partition, where.offset, ov, v)
				}
				acks.values[v] = where
				acks.byAt[where] = v
				acks.n++
			}
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

	var times, alls, serves []time.Duration
	failures := 0
	start := time.Now()
	for k := 1; k <= *kills; k++ {
		killed := leader(0, 30*time.Second)
		if killed == 0 {
			fatalf("kill %d: no serving leader", k)
		}
		// Produce flows through the current leader before the kill.
		if !waitAcks(acks.count()+20*int(numPartitions), 60*time.Second) {
			fatalf("kill %d: produce stalled before the kill", k)
		}
		acks.mu.Lock()
		acks.firstAck, acks.firstNode = time.Time{}, 0
		acks.covered, acks.allAck = map[int32]bool{}, time.Time{}
		acks.watchNot = killed
		killedAt := time.Now()
		acks.watchFrom = killedAt
		acks.mu.Unlock()
		sys.kill9(killed)

		var took, all, servedAfter time.Duration
		var newNode int32
		deadline := killedAt.Add(60 * time.Second)
		for {
			if servedAfter == 0 && sys.leaderNow(killed) != 0 {
				servedAfter = time.Since(killedAt)
			}
			acks.mu.Lock()
			fa, fn, aa := acks.firstAck, acks.firstNode, acks.allAck
			acks.mu.Unlock()
			if !aa.IsZero() {
				took, newNode, all = fa.Sub(killedAt), fn, aa.Sub(killedAt)
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if newNode == 0 {
			failures++
			fmt.Printf("kill %2d: killed node %d; NOT acknowledged on every partition within 60s\n", k, killed)
		} else {
			times = append(times, took)
			alls = append(alls, all)
			if servedAfter > 0 {
				serves = append(serves, servedAfter)
			}
			onAll := ""
			if numPartitions > 1 {
				onAll = fmt.Sprintf(", on every partition after %v", all.Round(time.Millisecond))
			}
			fmt.Printf("kill %2d: killed node %d; node %d leading after %v, acknowledged after %v%s (acked so far %d)\n",
				k, killed, newNode, servedAfter.Round(time.Millisecond), took.Round(time.Millisecond), onAll, acks.count())
		}

		// Restart the killed node and wait until it follows and is back in the ISR.
		if err := sys.restart(killed); err != nil {
			fatalf("kill %d: restart: %v", k, err)
		}
		rejoinBy := time.Now().Add(120 * time.Second)
		for !sys.rejoined(killed) {
			if time.Now().After(rejoinBy) {
				fatalf("kill %d: node %d did not rejoin the ISR within 120s", k, killed)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !waitAcks(acks.count()+20*int(numPartitions), 60*time.Second) {
		fatalf("produce stalled after the last kill")
	}
	close(stop)
	<-done
	elapsed := time.Since(start)

	// Read everything back from the final leader.
	if leader(0, 30*time.Second) == 0 {
		fatalf("no serving leader at the end")
	}
	acks.mu.Lock()
	values := acks.values
	acks.mu.Unlock()
	maxOff := map[int32]int64{}
	for _, where := range values {
		maxOff[where.partition] = max(maxOff[where.partition], where.offset)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(sys.seeds()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		fatalf("consumer: %v", err)
	}
	defer cons.Close()
	seen := map[string]int{}
	gotAt := map[string]at{}
	readUp := map[int32]bool{} // partitions read up to their last acknowledged offset
	rctx, rcancel := context.WithTimeout(ctx, 120*time.Second)
	defer rcancel()
	for len(readUp) < len(maxOff) && rctx.Err() == nil {
		fs := cons.PollFetches(rctx)
		fs.EachRecord(func(r *kgo.Record) {
			if m, ok := maxOff[r.Partition]; ok && r.Offset >= m {
				readUp[r.Partition] = true
			}
			seen[string(r.Value)]++
			gotAt[string(r.Value)] = at{r.Partition, r.Offset}
		})
	}
	lost, dup, moved := 0, 0, 0
	for v, where := range values {
		switch n := seen[v]; {
		case n == 0:
			lost++
		case n > 1:
			dup++
		case gotAt[v] != where:
			moved++
		}
	}

	slices.Sort(times)
	slices.Sort(alls)
	slices.Sort(serves)
	fmt.Println()
	fmt.Printf("failover time over %d kills (SIGKILL of the serving leader -> first acks=all ack by the new leader):\n", len(times))
	if len(times) > 0 {
		med := median(times)
		fmt.Printf("  min %v  median %v  max %v\n", times[0].Round(time.Millisecond), med.Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
		if *system == "moonmq" {
			fmt.Printf("  targets: median < 1.5s: %v; max < 3s: %v\n", med < 1500*time.Millisecond, times[len(times)-1] < 3*time.Second)
		}
	}
	if numPartitions > 1 && len(alls) > 0 {
		fmt.Printf("  to an ack on every one of the %d partitions: min %v  median %v  max %v\n", numPartitions,
			alls[0].Round(time.Millisecond), median(alls).Round(time.Millisecond), alls[len(alls)-1].Round(time.Millisecond))
	}
	if len(serves) > 0 {
		fmt.Printf("  of which until the new leader reports serving (status polled): median %v  max %v\n",
			median(serves).Round(time.Millisecond), serves[len(serves)-1].Round(time.Millisecond))
	}
	fmt.Printf("  kills without an ack on every partition within 60s: %d\n", failures)
	if term, ok := sys.elections(); ok {
		// One election per kill; anything more is an election nobody
		// asked for (a missed heartbeat) or a leadership hand-off.
		fmt.Printf("  Raft terms: %d at the first kill, %d at the end: %d elections for %d kills\n",
			startTerm, term, term-startTerm, *kills)
	}
	fmt.Printf("acknowledged records: %d (partitions read back up to their last acknowledged offset: %d of %d)\n", len(values), len(readUp), len(maxOff))
	fmt.Printf("  lost: %d  duplicated: %d  at another offset: %d\n", lost, dup, moved)
	if dupAck != "" {
		fmt.Printf("  offset acknowledged twice: %s\n", dupAck)
	}
	fmt.Printf("total run time %v\n", elapsed.Round(time.Second))
	sys.stopAll()
	if *jsonOut != "" {
		if *label == "" {
			*label = *system
		}
		if err := writeResult(*jsonOut, *label, times, alls, failures, len(values), lost+dup+moved); err != nil {
			fatalf("%v", err)
		}
	}
	if lost > 0 || dup > 0 || moved > 0 || failures > 0 || dupAck != "" {
		fmt.Printf("FAIL (logs in %s)\n", dir)
		os.Exit(1)
	}
	if !keep {
		os.RemoveAll(dir)
	}
}

// result is a run's outcome as failover.sh compares it.
type result struct {
	Name       string    `json:"name"`
	Partitions int32     `json:"partitions"`
	Kills      int       `json:"kills"`
	TimesMs    []float64 `json:"times_ms"` // sorted; to the first ack by the new leader
	MedianMs   float64   `json:"median_ms"`
	MaxMs      float64   `json:"max_ms"`
	// to an ack by the new leader on every partition (with one partition,
	// the same as the first)
	AllTimesMs []float64 `json:"all_times_ms"`
	AllMedian  float64   `json:"all_median_ms"`
	AllMax     float64   `json:"all_max_ms"`
	NoAck      int       `json:"kills_without_ack"`
	Acked      int       `json:"acknowledged"`
	Wrong      int       `json:"lost_duplicated_or_moved"`
}

func writeResult(path, name string, times, alls []time.Duration, noAck, acked, wrong int) error {
	r := result{Name: name, Partitions: numPartitions, Kills: len(times) + noAck, NoAck: noAck, Acked: acked, Wrong: wrong}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i := range times {
		r.TimesMs = append(r.TimesMs, ms(times[i]))
		r.AllTimesMs = append(r.AllTimesMs, ms(alls[i]))
	}
	if len(times) > 0 {
		r.MedianMs, r.MaxMs = ms(median(times)), r.TimesMs[len(r.TimesMs)-1]
		r.AllMedian, r.AllMax = ms(median(alls)), r.AllTimesMs[len(r.AllTimesMs)-1]
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// median of sorted, non-empty d.
func median(d []time.Duration) time.Duration {
	if len(d)%2 == 0 {
		return (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return d[len(d)/2]
}
