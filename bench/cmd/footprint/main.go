// Command footprint measures a broker's resident memory idle and holding
// topics of many partitions: it reads the broker processes' RSS (Linux
// /proc), creates a topic of each partition count in turn (replication
// factor -1, the broker's default), waits until Metadata shows a leader
// for every partition, lets the broker settle, reads the RSS again, and
// deletes the topic. The cost of an idle partition is the difference over
// the count. See docs/BENCHMARKS.md.
//
//	footprint --brokers 127.0.0.1:9092 --pids 1234 --partitions 1000,10000 --name moonmq --json out.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/bench"
)

// Result is one broker's footprint.
type Result struct {
	Name     string  `json:"name"`
	IdleMB   float64 `json:"idle_rss_mb"`
	Holdings []Held  `json:"holdings"`
}

// Held is the footprint with one topic of Partitions partitions.
type Held struct {
	Partitions      int     `json:"partitions"`
	RSSMB           float64 `json:"rss_mb"`
	PerPartitionKiB float64 `json:"per_partition_kib"`
	CreateSeconds   float64 `json:"create_seconds"` // until every partition had a leader
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	pidsFlag := flag.String("pids", "", "comma-separated broker process ids (all of a group)")
	parts := flag.String("partitions", "1000,10000", "comma-separated partition counts")
	name := flag.String("name", "", "label of the broker")
	settle := flag.Duration("settle", 10*time.Second, "how long the broker idles before its memory is read")
	jsonOut := flag.String("json", "", "write the result as JSON to this file")
	flag.Parse()

	var pids []int
	for _, f := range strings.Split(*pidsFlag, ",") {
		if p, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			pids = append(pids, p)
		}
	}
	if len(pids) == 0 {
		fail("--pids names no process")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	res := Result{Name: *name}
	time.Sleep(*settle)
	res.IdleMB = rssMB(pids)
	fmt.Printf("%s idle: %.1f MB resident\n", *name, res.IdleMB)
	for _, f := range strings.Split(*parts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fail("bad partition count %q", f)
		}
		topic := fmt.Sprintf("footprint-%d-%d", n, time.Now().UnixNano())
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		err = bench.CreateTopic(cctx, adm, topic, n)
		cancel()
		if err != nil {
			fail("creating %d partitions: %v", n, err)
		}
		created := time.Since(start)
		time.Sleep(*settle)
		h := Held{Partitions: n, RSSMB: rssMB(pids), CreateSeconds: created.Seconds()}
		h.PerPartitionKiB = (h.RSSMB - res.IdleMB) * 1e6 / 1024 / float64(n)
		res.Holdings = append(res.Holdings, h)
		fmt.Printf("%s with %d partitions: %.1f MB resident, %.1f KiB per partition (created in %.1fs)\n",
			*name, n, h.RSSMB, h.PerPartitionKiB, h.CreateSeconds)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		if _, err := adm.DeleteTopic(dctx, topic); err != nil {
			fmt.Fprintf(os.Stderr, "footprint: deleting %s: %v\n", topic, err)
		}
		cancel()
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail("%v", err)
		}
	}
}

// leaders counts topic's partitions that have a leader.
// rssMB sums the processes' resident memory.
func rssMB(pids []int) float64 {
	var total int64
	for _, pid := range pids {
		n, err := bench.ProcRSS(pid)
		if err != nil {
			fail("reading process %d: %v", pid, err)
		}
		total += n
	}
	return float64(total) / 1e6
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "footprint: "+format+"\n", a...)
	os.Exit(1)
}
