// Package bench_test runs MoonMQ's load generator (internal/bench) against
// franz-go's in-memory fake broker, kfake. It lives in this separate module
// so that kfake never becomes a dependency of the root module.
package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/bench"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runAgainstKfake runs `moonmq bench` with args against a fresh one-broker
// kfake and returns its JSON report and its table.
func runAgainstKfake(t *testing.T, args ...string) (bench.Report, string, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return runAgainst(t, c, args...)
}

// runAgainst runs `moonmq bench` with args against the kfake cluster c.
func runAgainst(t *testing.T, c *kfake.Cluster, args ...string) (bench.Report, string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	args = append([]string{"--brokers", strings.Join(c.ListenAddrs(), ","), "--name", "kfake", "--json", out}, args...)
	if err := bench.Command(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, stdout.String(), stderr.String()
}

func TestCommandAgainstKfake(t *testing.T) {
	rep, stdout, stderr := runAgainstKfake(t,
		"--records", "300",
		"--record-size", "200",
		"--acks", "1,-1",
		"--partitions", "1,3",
		"--progress-interval", "50ms")
	if rep.Target != "kfake" || rep.Version != bench.ReportVersion || len(rep.Results) != 8 {
		t.Fatalf("report: target %q version %d, %d results", rep.Target, rep.Version, len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Case, r.Error)
		}
		if r.Produce.Records != 300 || r.Produce.Errors != 0 || r.Produce.Bytes != 300*200 {
			t.Errorf("%s: produce %+v", r.Case, r.Produce)
		}
		if r.Produce.RecordsPerSec <= 0 || r.Produce.P50Ms <= 0 || r.Produce.P99Ms < r.Produce.P50Ms {
			t.Errorf("%s: produce stats %+v", r.Case, r.Produce)
		}
		// 300 records plus one warm-up record per partition.
		if want := int64(300 + r.Partitions); !r.Consume.Complete || r.Consume.Records != want {
			t.Errorf("%s: consumed %d records (complete %v), want %d", r.Case, r.Consume.Records, r.Consume.Complete, want)
		}
		if !strings.Contains(stdout, r.Case) {
			t.Errorf("table lacks %q", r.Case)
		}
	}
	if !strings.Contains(stderr, "\r[acks=-1 p=3 pipelined]") {
		t.Errorf("no progress lines on stderr:\n%s", stderr)
	}
}

// TestEndToEndAgainstKfake runs the end-to-end mode, measuring this
// process as the broker (kfake runs in it): every acknowledged record
// reaches the consumer and gets a latency, and the usage is reported.
func TestEndToEndAgainstKfake(t *testing.T) {
	rep, stdout, _ := runAgainstKfake(t,
		"--modes", "end-to-end", "--rate", "2000", "--duration", "1s",
		"--acks", "-1", "--partitions", "1,3",
		"--broker-pids", strconv.Itoa(os.Getpid()))
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for _, r := range rep.Results {
		p, cons := r.Produce, r.Consume
		if r.Error != "" || p.Records == 0 || p.Errors != 0 || !cons.Complete || cons.Records != p.Records {
			t.Errorf("%s: error %q, produced %d (%d errors), consumed %d complete=%v", r.Case, r.Error, p.Records, p.Errors, cons.Records, cons.Complete)
		}
		if cons.E2EP50Ms <= 0 || cons.E2EP99Ms < cons.E2EP50Ms || cons.E2EP999Ms < cons.E2EP99Ms {
			t.Errorf("%s: end-to-end latency %+v", r.Case, cons)
		}
		if r.Broker == nil || r.Broker.Processes != 1 || r.Broker.CPUSeconds <= 0 || r.Broker.RSSPeakMB <= 0 {
			t.Errorf("%s: broker usage %+v", r.Case, r.Broker)
		}
	}
	if !strings.Contains(stdout, "end-to-end p50") {
		t.Errorf("table lacks the end-to-end latency:\n%s", stdout)
	}
}

// TestStickyWarmUpReachesEveryPartition: with a sticky partitioner the
// warm-up still writes to every partition (so that no partition's first
// write falls in the measured time), and the consumer expects its records.
func TestStickyWarmUpReachesEveryPartition(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const partitions, producers, records = 40, 2, 200
	rep, _, _ := runAgainst(t, c, "--partitioner", "sticky", "--partitions", strconv.Itoa(partitions),
		"--producers", strconv.Itoa(producers), "--records", strconv.Itoa(records),
		"--acks", "-1", "--modes", "pipelined", "--keep-topics")
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	// The run's records, each client's warm-up (one record per partition,
	// wherever the partitioner puts it) and one more for every partition.
	if want := int64(records + producers*partitions + partitions); r.Error != "" || !r.Consume.Complete || r.Consume.Records != want {
		t.Fatalf("error %q, consumed %d (complete %v), want %d", r.Error, r.Consume.Records, r.Consume.Complete, want)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), r.Topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	ends.Each(func(o kadm.ListedOffset) {
		seen++
		if o.Err != nil || o.Offset < 1 {
			t.Errorf("partition %d: end offset %d, err %v: the warm-up missed it", o.Partition, o.Offset, o.Err)
		}
	})
	if seen != partitions {
		t.Errorf("%d partitions listed, want %d", seen, partitions)
	}
}

// TestTransformAgainstKfake runs the consume-transform-produce mode with
// two sessions in one group: every input record is copied exactly once
// (the read-back of the output, read_committed, checks it), and the
// broker's usage is reported.
func TestTransformAgainstKfake(t *testing.T) {
	rep, stdout, stderr := runAgainstKfake(t,
		"--modes", "consume-transform-produce", "--records", "3000", "--record-size", "100",
		"--acks", "-1", "--partitions", "4", "--producers", "2",
		"--broker-pids", strconv.Itoa(os.Getpid()))
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	// The fill's 3000 records and its warm-up record to each partition.
	const want = 3000 + 4
	if r.Error != "" || r.Produce.Records != want || r.Produce.Errors != 0 {
		t.Fatalf("error %q, copied %d (%d errors), want %d\n%s", r.Error, r.Produce.Records, r.Produce.Errors, want, stderr)
	}
	if !r.Consume.Complete || r.Consume.Records != want {
		t.Errorf("read back %d committed records (complete %v), want %d", r.Consume.Records, r.Consume.Complete, want)
	}
	if r.Produce.P50Ms <= 0 || r.Produce.P99Ms < r.Produce.P50Ms {
		t.Errorf("poll-to-commit latency %+v", r.Produce)
	}
	if r.Broker == nil || r.Broker.Processes != 1 || r.Broker.RSSPeakMB <= 0 {
		t.Errorf("broker usage %+v", r.Broker)
	}
	if !strings.Contains(stdout, "consume-transform-produce") {
		t.Errorf("table lacks the case:\n%s", stdout)
	}
}
