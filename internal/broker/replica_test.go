package broker

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/replication/shipping"
	"github.com/moonmq/moonmq/internal/vfs"
)

// fill gives every list of a request one entry (recursively), with
// non-empty names, so refusals are exercised on nested answers.
func fill(v reflect.Value, depth int) {
	if depth == 0 {
		return
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch {
		case f.Kind() == reflect.String:
			f.SetString("x")
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			e := reflect.New(f.Type().Elem())
			if m := e.MethodByName("Default"); m.IsValid() {
				m.Call(nil)
			}
			fill(e.Elem(), depth-1)
			f.Set(reflect.Append(f, e.Elem()))
		case f.Kind() == reflect.Slice && (f.Type().Elem().Kind() == reflect.String || f.Type().Elem().Kind() == reflect.Int32):
			f.Set(reflect.Append(f, reflect.Zero(f.Type().Elem())))
		}
	}
}

// TestFollowerRefusesEveryRequest answers every request kind and version
// the broker accepts as a follower would, and checks that each refusal
// encodes and carries an error for what was asked.
func TestFollowerRefusesEveryRequest(t *testing.T) {
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, Role: "follower", ClientAddress: "127.0.0.1:9093",
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}}}
	b := &Broker{cfg: cfg, nodeID: 2}
	b.repl = newReplica(b)
	b.repl.leader = 1
	checked := map[int16]bool{}
	for key, vr := range versions {
		for v := vr.Min; v <= vr.Max; v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			fill(reflect.ValueOf(req).Elem(), 4)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				p.Acks = -1
			}
			hdr := protocol.Header{Key: key, Version: v}
			resp, refused := b.refuseOnFollower(protocol.Request{Header: hdr, Body: req})
			if !refused || resp == nil {
				continue
			}
			if resp.GetVersion() != v {
				t.Fatalf("%s v%d: answer has version %d", kmsg.NameForKey(key), v, resp.GetVersion())
			}
			_ = protocol.AppendResponse(nil, hdr, resp)
			checked[key] = true
			if coordinatorAPIs[key] || key == 22 && req.(*kmsg.InitProducerIDRequest).TransactionalID != nil {
				if codes := errorFields(reflect.ValueOf(resp).Elem()); len(codes) == 0 || slices.ContainsFunc(codes, func(c int16) bool { return c != errNotCoordinator }) {
					t.Fatalf("%s v%d: error fields %v, want NOT_COORDINATOR in each", kmsg.NameForKey(key), v, codes)
				}
			}
			switch r := resp.(type) {
			case *kmsg.ProduceResponse:
				p := r.Topics[0].Partitions[0]
				if p.ErrorCode != errNotLeaderOrFollower || p.CurrentLeader.LeaderID != 1 {
					t.Fatalf("produce v%d: %+v", v, p)
				}
			case *kmsg.FetchResponse:
				p := r.Topics[0].Partitions[0]
				if p.ErrorCode != errNotLeaderOrFollower || r.ErrorCode != 0 {
					t.Fatalf("fetch v%d: %+v", v, r)
				}
			case *kmsg.OffsetCommitResponse:
				if r.Topics[0].Partitions[0].ErrorCode != errNotCoordinator {
					t.Fatalf("offset commit v%d: %+v", v, r)
				}
			case *kmsg.CreateTopicsResponse:
				if r.Topics[0].ErrorCode != errNotController || r.Topics[0].Topic != "x" {
					t.Fatalf("create topics v%d: %+v", v, r)
				}
			case *kmsg.FindCoordinatorResponse:
				if v < 4 && (r.NodeID != 1 || r.Port != 9092) || v >= 4 && (r.Coordinators[0].NodeID != 1 || r.Coordinators[0].Port != 9092) {
					t.Fatalf("find coordinator v%d: %+v", v, r)
				}
			}
		}
	}
	for _, key := range []int16{0, 1, 2, 8, 9, 10, 11, 19, 22, 24} {
		if !checked[key] {
			t.Errorf("%s was not refused", kmsg.NameForKey(key))
		}
	}
}

// coordinatorAPIs are the group and transaction coordinator APIs (and
// InitProducerId with a transactional id): a follower answers them
// NOT_COORDINATOR.
var coordinatorAPIs = map[int16]bool{8: true, 9: true, 11: true, 12: true, 13: true, 14: true, 15: true, 42: true,
	47: true, 68: true, 69: true, 24: true, 25: true, 26: true, 28: true, 65: true}

// errorFields lists every ErrorCode field of a response struct, nested
// lists included.
func errorFields(v reflect.Value) []int16 {
	var out []int16
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16 {
				out = append(out, int16(v.Field(i).Int()))
			} else if f.IsExported() {
				out = append(out, errorFields(v.Field(i))...)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			out = append(out, errorFields(v.Index(i))...)
		}
	}
	return out
}

// TestFollowerMetadataForUncopiedTopic: a follower's topic list lags the
// leader's, so a topic it has not copied yet is "not available yet"
// (retriable), never "unknown" (which fails records the leader would take).
func TestFollowerMetadataForUncopiedTopic(t *testing.T) {
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, Role: "follower", ClientAddress: "127.0.0.1:9093",
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}}}
	b := &Broker{cfg: cfg, nodeID: 2, topics: map[string]*topic{}, byID: map[[16]byte]*topic{}}
	b.repl = newReplica(b)
	b.repl.leader = 1
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	name := "not-copied-yet"
	req.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
	req.AllowAutoTopicCreation = true
	resp := b.handleMetadata(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != errLeaderNotAvailable {
		t.Fatalf("follower metadata for an uncopied topic: %+v", resp.Topics)
	}
	if len(b.topics) != 0 {
		t.Fatal("a follower auto-created a topic")
	}
}

// TestFailoverReplicaOpensWithHWAtLogStart: in a failover group what is
// durable on one replica may still be truncated, so a restarted replica
// must not expose its local log end as the high watermark.
func TestFailoverReplicaOpensWithHWAtLogStart(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	single := &Broker{cfg: cfg, fs: vfs.Default, log: slog.Default(), nodeID: 1}
	single.flush = newFlusher(single)
	tp := &topic{name: "t", id: newUUID(), dir: filepath.Join(dir, "t")}
	tp.settings = resolveSettings(&cfg, nil)
	p, err := single.openPartition(tp, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}, {Value: []byte("y")}})
	if _, err := p.Log().Append(batch, 0); err != nil {
		t.Fatal(err)
	}
	p.Close()

	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, ClientAddress: "127.0.0.1:9093", Failover: config.Failover{Enabled: true},
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}, {Id: 3, Address: "127.0.0.1:9196", ClientAddress: "127.0.0.1:9094"}}}
	b := &Broker{cfg: cfg, fs: vfs.Default, log: slog.Default(), nodeID: 2}
	b.flush = newFlusher(b)
	b.repl = newReplica(b)
	p, err = b.openPartition(tp, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Log().EndOffset() != 2 || p.HighWatermark() != 0 {
		t.Fatalf("failover replica opened with log end %d and high watermark %d, want 2 and 0", p.Log().EndOffset(), p.HighWatermark())
	}
}

// TestReplicaLongPollWatchesEveryPartition: a follower's long-poll ends
// when any of its partitions gets data, not only the first, and a
// partition deleted or unknown meanwhile does not end it (the others may
// still get data; the next answer reports the deletion).
func TestReplicaLongPollWatchesEveryPartition(t *testing.T) {
	b := openTestBroker(t)
	b.mu.Lock()
	w, err := b.createTopicLocked("watched", 3, nil)
	if err == nil {
		_, err = b.createTopicLocked("doomed", 1, nil)
	}
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	src := source{r: &replica{b: b}}
	parts := []shipping.FetchPosition{
		{Topic: "doomed", Partition: 0},
		{Topic: "watched", Partition: 0},
		{Topic: "never-created", Partition: 0},
		{Topic: "watched", Partition: 1},
		{Topic: "watched", Partition: 2},
	}

	// Nothing arrives: the wait ends when it should, not before.
	start := time.Now()
	src.WaitForData(context.Background(), parts, 20*time.Millisecond)
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("an empty long-poll ended after %v, before its wait", waited)
	}

	done := make(chan struct{})
	go func() {
		src.WaitForData(context.Background(), parts, time.Minute)
		close(done)
	}()
	stillWaiting := func(what string) {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("the long-poll ended %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
	stillWaiting("with no data")
	b.mu.Lock()
	err = b.deleteTopicLocked(b.topics["doomed"])
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	stillWaiting("when one of its partitions was deleted")

	// Data on the last partition of the request ends it.
	last := w.partitions[2]
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
	if _, err := last.Log().Append(batch, 0); err != nil {
		t.Fatal(err)
	}
	last.Wake()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not end when its last partition got data")
	}
}

// ownSync is a follower log the broker's volume does not cover: it syncs
// on its own.
type ownSync struct{ replicaLog }

// TestSinkSyncLogsMapsEachResult: a follower's logs on the data volume
// share one volume sync; if it fails, each of them fails (the volume does
// not say whose data was lost) and keeps its durable end, while a log
// synced on its own reports its own result, each in its place.
func TestSinkSyncLogsMapsEachResult(t *testing.T) {
	m := vfs.NewMem()
	cfg := config.Default()
	cfg.DataDir = "data"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, WithFS(m))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.volume == nil {
		t.Fatal("the broker opened no volume on a MemFS")
	}
	b.mu.Lock()
	tp, err := b.createTopicLocked("synced", 3, nil)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s := sink{r: &replica{b: b}}
	logs := make([]shipping.ReplicaLog, 3)
	for i, p := range tp.partitions {
		l, ok := s.Partition(replication.TopicPartition{Topic: "synced", Partition: p.Index})
		if !ok {
			t.Fatalf("no replica log for partition %d", i)
		}
		logs[i] = l
	}
	logs[1] = ownSync{logs[1].(replicaLog)}
	appendOne := func() {
		t.Helper()
		for _, p := range tp.partitions {
			batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
			if _, err := p.Log().Append(batch, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendOne()
	fsyncs := b.Snapshot().Fsyncs
	for i, err := range s.SyncLogs(logs) {
		if err != nil || logs[i].DurableEnd() != 1 {
			t.Fatalf("log %d: %v, durable end %d; want nil and 1", i, err, logs[i].DurableEnd())
		}
	}
	// A follower's syncs are timed as the leader's passes are: the
	// volume's once, the log synced on its own once.
	if n := b.Snapshot().Fsyncs - fsyncs; n != 2 {
		t.Fatalf("%d syncs counted for one volume sync and one log's own, want 2", n)
	}

	appendOne()
	volDir := b.topicsDir()
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == volDir {
			return vfs.ErrInjected
		}
		return nil
	})
	errs := s.SyncLogs(logs)
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], vfs.ErrInjected) || logs[i].DurableEnd() != 1 {
			t.Errorf("log %d after a failed volume sync: %v, durable end %d; want the injected error and 1", i, errs[i], logs[i].DurableEnd())
		}
	}
	if errs[1] != nil || logs[1].DurableEnd() != 2 {
		t.Errorf("log 1 synced on its own: %v, durable end %d; want nil and 2", errs[1], logs[1].DurableEnd())
	}
}
