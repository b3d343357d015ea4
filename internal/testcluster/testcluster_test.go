package testcluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

func TestMain(m *testing.M) { Main(m) }

// TestSingleBrokerRestartAndReadLog exercises the harness on one broker:
// start, produce, a clean stop, the log read from disk, a restart on the
// same data directory, and a kill.
func TestSingleBrokerRestartAndReadLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker process")
	}
	c := Start(t, WithReplicas(1))
	r := c.Replicas[0]
	cl := c.Client(kgo.DefaultProduceTopic("h"), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx := Context(t, 60*time.Second)
	for _, v := range []string{"one", "two", "three"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r.Stop(30 * time.Second)
	if r.Running() {
		t.Fatal("running after Stop")
	}
	data, start, end, err := r.ReadLog("h", 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := DecodeLog(data)
	if err != nil {
		t.Fatal(err)
	}
	if start != 0 || end != 3 || len(recs) != 3 || recs[2].Offset != 2 || !bytes.Equal(recs[2].Value, []byte("three")) {
		t.Fatalf("log [%d, %d) holds %d records, want [0, 3) with the three records", start, end, len(recs))
	}
	r.Start()
	rec, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("four")}).First()
	if err != nil || rec.Offset != 3 {
		t.Fatalf("after the restart: offset %v, err %v", rec, err)
	}
	r.Kill()
	if _, err := r.Status(); err == nil {
		t.Fatal("status answered by a killed broker")
	}
}

// TestThreeReplicasElectAndPause checks the harness's view of a failover
// group: a serving leader is found, the ISR becomes the whole group, and a
// paused follower is reported as paused and not asked for its status.
func TestThreeReplicasElectAndPause(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	c := Start(t)
	l := c.WaitISR(60*time.Second, 1, 2, 3)
	f := c.Others(l)[0]
	f.Pause()
	if !f.Paused() || len(c.Up()) != 2 {
		t.Fatalf("after Pause: paused %v, up %d", f.Paused(), len(c.Up()))
	}
	f.Resume()
	if f.Paused() {
		t.Fatal("paused after Resume")
	}
	if st, err := f.Status(); err != nil || st.Role != "follower" {
		t.Fatalf("resumed follower: %+v, %v", st, err)
	}
}

// TestLastOffset finds the last offset of the last whole batch and stops
// at a torn one.
func TestLastOffset(t *testing.T) {
	var data []byte
	for _, base := range []int64{0, 3} {
		b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1, BaseOffset: base},
			[]recordbatch.Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}})
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	if got := lastOffset(data); got != 5 {
		t.Fatalf("lastOffset = %d, want 5", got)
	}
	if got := lastOffset(data[:len(data)-1]); got != 2 {
		t.Fatalf("lastOffset of a torn second batch = %d, want 2", got)
	}
	if got := lastOffset(nil); got != -1 {
		t.Fatalf("lastOffset(nil) = %d", got)
	}
}

// TestStaticModeLeadsWithRoleLeader checks the static-mode configuration:
// the replica given Role leader serves and acks=all reaches the others.
func TestStaticModeLeadsWithRoleLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	c := Start(t, WithFailover(false), WithLeaderRole(2))
	if l := c.Leader(60 * time.Second); l.ID != 2 {
		t.Fatalf("%v leads, want replica 2", l)
	}
	cl := c.Client(kgo.DefaultProduceTopic("s"), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err := cl.ProduceSync(Context(t, 60*time.Second), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
