package interop

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPipelinedCommitsKeepTheirOrder sends many OffsetCommits for the same
// partitions on one connection without waiting for answers, as sarama
// does when each partition's goroutine commits. Kafka handles a
// connection's requests one at a time, so the last commit sent is the one
// that stays; a broker that let them overtake each other on the way to
// the log would keep an older offset and re-deliver records.
func TestPipelinedCommitsKeepTheirOrder(t *testing.T) {
	in := startBroker(t)
	conn, err := net.Dial("tcp", in.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))

	const topic, group, partitions, commits = "pipelined", "pipelined-group", 4, 200
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pipelined-commits"))
	corr := int32(0)
	send := func(req kmsg.Request) {
		corr++
		if _, err := rw.Write(f.AppendRequest(nil, req, corr)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(resp kmsg.Response) {
		var size [4]byte
		if _, err := io.ReadFull(rw, size[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(rw, body); err != nil {
			t.Fatal(err)
		}
		body = body[4:] // correlation id
		if resp.IsFlexible() {
			body = body[1:] // no tagged fields in the header
		}
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
	}

	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 5
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, partitions, 1
	create.Topics = append(create.Topics, ct)
	create.TimeoutMillis = 10000
	send(create)
	rw.Flush()
	cresp := create.ResponseKind().(*kmsg.CreateTopicsResponse)
	read(cresp)
	if err := kerr.ErrorForCode(cresp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}

	// Each request commits every partition; later requests commit
	// higher offsets.
	for i := 1; i <= commits; i++ {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 8
		req.Group, req.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < partitions; p++ {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, int64(i)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		send(req)
	}
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= commits; i++ {
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = 8
		read(resp)
		for _, p := range resp.Topics[0].Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("commit %d partition %d: %v", i, p.Partition, err)
			}
		}
	}

	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version = 7
	fetch.Group = group
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic = topic
	for p := int32(0); p < partitions; p++ {
		ft.Partitions = append(ft.Partitions, p)
	}
	fetch.Topics = append(fetch.Topics, ft)
	send(fetch)
	rw.Flush()
	fresp := fetch.ResponseKind().(*kmsg.OffsetFetchResponse)
	read(fresp)
	for _, p := range fresp.Topics[0].Partitions {
		if p.Offset != commits {
			t.Errorf("partition %d: committed offset %d after %d pipelined commits, want the last one, %d", p.Partition, p.Offset, commits, commits)
		}
	}
}
