package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/reqmem"
)

// TestFetchReadBuffersGoBack: a fetch answer's reads are lent from the
// off-heap frame pool, which the garbage collector cannot reclaim, so every
// one must come back: after answers are written (reads of data, then long
// polls at the end of the log), and when a client goes away with answers
// unwritten.
func TestFetchReadBuffersGoBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := openTestBroker(t, func(cfg *config.Server) { cfg.AdvertisedAddress = ln.Addr().String() })
	s := b.Serve(ln)
	t.Cleanup(func() { s.Close() })
	addr := ln.Addr().String()
	if !offHeapFrames(b) {
		t.Skip("no off-heap frame pool on this platform")
	}

	const topic, partitions, perPartition = "fetchmem", 3, 600
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1000)
	rand.Read(value) // not compressible: reads of hundreds of KiB
	for i := 0; i < perPartition; i++ {
		for p := int32(0); p < partitions; p++ {
			cl.Produce(ctx, &kgo.Record{Partition: p, Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// A consumer reads everything, then long-polls at the end.
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < partitions*perPartition; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	time.Sleep(500 * time.Millisecond) // a few empty long polls
	cons.Close()
	waitLent(t, b.mem.frames, "after a consumer read a topic and closed")

	// Clients that ask for everything and go away without reading the
	// answers: whatever the writer had not sent is given back too.
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		for corr := int32(0); corr < 8; corr++ {
			if _, err := c.Write(fetchFrame(topic, partitions, corr)); err != nil {
				t.Fatal(err)
			}
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset: the broker's writes fail
		}
		c.Close()
	}
	waitLent(t, b.mem.frames, "after clients closed with answers unread")
}

// offHeapFrames reports whether the broker's frame pool maps its buffers.
func offHeapFrames(b *Broker) bool {
	buf := b.mem.frames.Get(1 << 20)
	defer b.mem.frames.Put(buf)
	return b.mem.frames.Mapped() > 0
}

func waitLent(t *testing.T, p *reqmem.Pool, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Lent() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d frame buffers still lent", when, p.Lent())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fetchFrame is a Fetch v11 request for every partition of topic from
// offset 0, up to 1 MiB each, framed for the wire.
func fetchFrame(topic string, partitions int32, corr int32) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxWaitMillis = 500
	req.MaxBytes = 50 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < partitions; p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	body := []byte{0, 0, 0, 0}
	body = binary.BigEndian.AppendUint16(body, uint16(req.Key()))
	body = binary.BigEndian.AppendUint16(body, uint16(req.GetVersion()))
	body = binary.BigEndian.AppendUint32(body, uint32(corr))
	body = binary.BigEndian.AppendUint16(body, 4)
	body = append(body, "test"...)
	body = req.AppendTo(body)
	binary.BigEndian.PutUint32(body, uint32(len(body)-4))
	return body
}
