package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcluster"
)

func brokerStats(t *testing.T, metrics string) status.Stats {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s status.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("/stats: %v: %s", err, b)
	}
	return s
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDiskFullSingleNode: a single node on a 48 MiB volume that fills up
// (no reserve, so writes really fail with ENOSPC part way) answers
// produce and offset commits with KAFKA_STORAGE_ERROR, says so once in its
// log and on /stats, /metrics and /health/ready, keeps serving reads, and
// takes writes again by itself once DeleteRecords frees space. After a
// restart every acknowledged record is there and nothing else is.
func TestDiskFullSingleNode(t *testing.T) {
	vol := testcluster.SmallVolume(t, 48<<20)
	port, mport := freePort(t), freePort(t)
	data := filepath.Join(vol, "data")
	cfg := writeConfig(t, data, port, mport, `, "MinFreeDiskBytes": -1`)
	p := startProc(t, cfg, port, mport)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := newClient(t, p.addr, kgo.RecordRetries(2), kgo.RecordDeliveryTimeout(5*time.Second),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(64))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": kadm.StringPtr("1048576")}, "fill"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "keep"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "keep", Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commit := func() error {
		resp, err := adm.CommitOffsets(ctx, "readers", kadm.OffsetsFromRecords(kgo.Record{Topic: "keep", Partition: 0, Offset: 0}))
		if err != nil {
			return err
		}
		return resp.Error()
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}

	// Fill the volume with 64 KiB records, acks=all, until produce fails.
	acked := map[string]bool{}
	value := func(i int) []byte {
		v := make([]byte, 64<<10)
		rand.Read(v) // incompressible
		copy(v, fmt.Sprintf("fill-%06d-", i))
		return v
	}
	var fullErr error
	for i := 0; fullErr == nil; i++ {
		if i > 2000 {
			t.Fatal("48 MiB took more than 2000 records of 64 KiB")
		}
		r := &kgo.Record{Topic: "fill", Value: value(i)}
		if fullErr = cl.ProduceSync(ctx, r).FirstErr(); fullErr == nil {
			acked[string(r.Value[:12])] = true
		}
	}
	t.Logf("volume full after %d acknowledged records: %v", len(acked), fullErr)
	// The client retries (KAFKA_STORAGE_ERROR is retriable, as in Kafka)
	// until its delivery timeout; the broker's own answer is the error,
	// not a wait.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 30000
	batch := produceBatch(t, value(99999))
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "fill"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.KafkaStorageError.Code {
		t.Fatalf("produce to a full disk answered %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code))
	}

	st := brokerStats(t, p.metrics)
	if !st.Disk.Full || st.Disk.RefusedAppends == 0 || st.Disk.TotalBytes == 0 {
		t.Fatalf("/stats disk %+v: want full, with refused appends", st.Disk)
	}
	if code, body := httpGet(t, "http://"+p.metrics+"/health/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk full") {
		t.Fatalf("/health/ready: %d %q, want 503 naming the full disk", code, body)
	}
	if _, body := httpGet(t, "http://"+p.metrics+"/metrics"); !strings.Contains(body, "moonmq_disk_full 1") {
		t.Fatal("/metrics does not say moonmq_disk_full 1")
	}
	// The broker's own writes fail the same clean way.
	if err := commit(); !errors.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("offset commit on a full disk: %v, want KAFKA_STORAGE_ERROR", err)
	}
	// So do the transaction coordinator's: a new transactional id must
	// be recorded in __transaction_state before it gets a producer id.
	initReq := kmsg.NewPtrInitProducerIDRequest()
	initReq.TransactionalID, initReq.TransactionTimeoutMillis = kmsg.StringPtr("on-a-full-disk"), 60000
	initReq.ProducerID, initReq.ProducerEpoch = -1, -1
	initResp, err := initReq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if initResp.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("InitProducerID for a new transactional id on a full disk: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(initResp.ErrorCode))
	}
	// Reads are served.
	if got := consumeAll(t, p.addr, "keep", 1); string(got[0].Value) != "kept" {
		t.Fatalf("read %q from keep", got[0].Value)
	}
	// Once, not once per attempt.
	if n := strings.Count(p.log(), "disk health: disk full;"); n != 1 {
		t.Fatalf("the full disk was logged %d times, want once:\n%s", n, p.log())
	}
	if strings.Contains(p.log(), "level=ERROR") && strings.Count(p.log(), "level=ERROR") > 1 {
		t.Fatalf("errors logged besides the one disk-full line:\n%s", p.log())
	}
	if n := strings.Count(p.log(), "append failed"); n > 0 {
		t.Fatalf("%d append failures logged besides the disk-full line", n)
	}

	// Free space: delete what "fill" holds up to its end.
	ends, err := adm.ListEndOffsets(ctx, "fill")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("fill", 0)
	upTo := kadm.Offsets{}
	upTo.Add(kadm.Offset{Topic: "fill", Partition: 0, At: end.Offset})
	del, err := adm.DeleteRecords(ctx, upTo)
	if err != nil || del.Error() != nil {
		t.Fatalf("DeleteRecords up to %d (%v): %v %v; stats %+v", end.Offset, end.Err, err, del.Error(), brokerStats(t, p.metrics).Partitions)
	}
	deadline := time.Now().Add(30 * time.Second)
	for brokerStats(t, p.metrics).Disk.Full {
		if time.Now().After(deadline) {
			t.Fatalf("still full 30 s after DeleteRecords: %+v", brokerStats(t, p.metrics).Disk)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 100000; i < 100010; i++ {
		r := &kgo.Record{Topic: "fill", Value: value(i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce after space was freed: %v", err)
		}
		acked[string(r.Value[:12])] = true
	}
	if err := commit(); err != nil {
		t.Fatalf("offset commit after space was freed: %v", err)
	}
	if !strings.Contains(p.log(), "space is free again; appends resume") {
		t.Fatal("the broker did not log that appends resume")
	}
	cl.Close()

	// Restart: what is left of "fill" is exactly the acknowledged records
	// after the deletion point, whole.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	p = startProc(t, cfg, port, mport)
	if strings.Contains(p.log(), "lost data that had been durable") {
		t.Fatalf("recovery found damage:\n%s", p.log())
	}
	got := consumeAll(t, p.addr, "fill", 10)
	for _, r := range got {
		if len(r.Value) != 64<<10 || !acked[string(r.Value[:12])] {
			t.Fatalf("read a record that was never acknowledged: %q", r.Value[:12])
		}
	}
}

// consumeAll reads topic partition 0 from its start until n records or
// 20 s, failing the test with fewer.
func consumeAll(t *testing.T, addr, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), n, topic)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// produceBatch is one record batch holding v, as a client would send it.
func produceBatch(t *testing.T, v []byte) []byte {
	t.Helper()
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Timestamp: time.Now().UnixMilli(), Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// faultyProc starts a broker whose disk faults come from a file
// (diskhealth.FaultsFileEnv) and returns it with that file's path.
func faultyProc(t *testing.T, extra string) (*proc, string) {
	t.Helper()
	port, mport := freePort(t), freePort(t)
	faults := filepath.Join(t.TempDir(), "disk-faults")
	cfg := writeConfig(t, t.TempDir(), port, mport, extra)
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = append(os.Environ(), diskhealth.FaultsFileEnv+"="+faults)
	p := startCmd(t, cmd, &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("127.0.0.1:%d", mport)})
	if !strings.Contains(p.log(), "TEST MODE: disk faults are injected") {
		t.Fatalf("the broker did not warn that its disk faults are a test's:\n%s", p.log())
	}
	return p, faults
}

// TestFsyncEIOStopsTheBroker: a failed fsync stops the broker (retrying
// one can report success for data the kernel dropped), with exit code 74
// and a log line naming the file and the error; the records acknowledged
// before it are there after a restart.
func TestFsyncEIOStopsTheBroker(t *testing.T) {
	p, faults := faultyProc(t, "")
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("eio"), kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("durable")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := diskhealth.WriteFaults(faults, "fsync-eio"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the broker re-reads the file every 100 ms
	// The client keeps the record until it is closed: the broker is gone.
	acked := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Value: []byte("never acknowledged")}, func(_ *kgo.Record, err error) { acked <- err })
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 74 {
			t.Fatalf("the broker ended with %v, want exit code 74", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the broker kept running after a failed fsync")
	}
	cl.Close()
	if err := <-acked; err == nil {
		t.Fatal("a produce was acknowledged although its fsync failed")
	}
	log := p.log()
	if !strings.Contains(log, "unrecoverable storage error") || !strings.Contains(log, "input/output error") ||
		!strings.Contains(log, "file=") || !strings.Contains(log, "/topics/eio/0/") {
		t.Fatalf("the log does not name the file and the error:\n%s", log)
	}
	// Restarted on a healthy disk, the acknowledged record is there.
	if err := diskhealth.WriteFaults(faults); err != nil {
		t.Fatal(err)
	}
	p2 := startCmd(t, exec.Command(p.cmd.Path, p.cmd.Args[1:]...), &proc{addr: p.addr, metrics: p.metrics})
	if got := consumeAll(t, p2.addr, "eio", 1); string(got[0].Value) != "durable" {
		t.Fatalf("read %q after the restart", got[0].Value)
	}
}

// TestReadEIOFailsOnlyThatFetch: reads of one partition's files failing
// with EIO answer that partition's fetches with KAFKA_STORAGE_ERROR, logged
// once; the broker stays up and serves the other partitions.
func TestReadEIOFailsOnlyThatFetch(t *testing.T) {
	p, faults := faultyProc(t, "")
	cl := newClient(t, p.addr, kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"sick", "well"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(topic)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := diskhealth.WriteFaults(faults, "read-eio topics/sick/"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "sick", "well")
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(topic string) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = -1, 100, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topics[topic].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 5 {
		if code := fetch("sick").Topics[0].Partitions[0].ErrorCode; code != kerr.KafkaStorageError.Code {
			t.Fatalf("fetch of the failing partition answered %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code))
		}
	}
	if rp := fetch("well").Topics[0].Partitions[0]; rp.ErrorCode != 0 || len(rp.RecordBatches) == 0 {
		t.Fatalf("fetch of a healthy partition: %v, %d bytes", kerr.ErrorForCode(rp.ErrorCode), len(rp.RecordBatches))
	}
	if n := strings.Count(p.log(), "read failed"); n != 1 {
		t.Fatalf("the failing reads were logged %d times, want once", n)
	}
	if p.cmd.ProcessState != nil {
		t.Fatal("the broker stopped")
	}
}
