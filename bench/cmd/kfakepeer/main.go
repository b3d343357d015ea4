// Command kfakepeer runs franz-go's fake Kafka cluster (kfake) as a
// stand-alone, single-broker peer for the MoonMQ benchmarks. It listens on
// 127.0.0.1 at --port, prints "kfakepeer listening on ADDR" once ready and
// runs until SIGINT or SIGTERM.
//
// By default kfake keeps all data in memory. --data-dir makes it persist to
// disk (page cache only, like Kafka's default) and --sync-writes adds an
// fsync per produced batch. --discard answers every produce at once and
// keeps nothing (a partition's offsets still count up): the rate a
// benchmark client reaches against it is what the client itself can send
// on the machine, the ceiling for any broker measured with it there.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	port := flag.Int("port", 9092, "TCP port to listen on (127.0.0.1)")
	dataDir := flag.String("data-dir", "", "persist data in this directory (default: in memory)")
	syncWrites := flag.Bool("sync-writes", false, "fsync every produced batch (needs --data-dir)")
	discard := flag.Bool("discard", false, "answer every produce at once and keep nothing: the benchmark client's own ceiling")
	flag.Parse()

	if *syncWrites && *dataDir == "" {
		fmt.Fprintln(os.Stderr, "kfakepeer: --sync-writes needs --data-dir")
		os.Exit(2)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port)}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakepeer: %v\n", err)
		os.Exit(1)
	}
	if *discard {
		discardProduce(c)
	}
	fmt.Printf("kfakepeer listening on %s\n", c.ListenAddrs()[0])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	c.Close()
}

// discardProduce answers every produce request with success, each batch
// at its partition's next offset, and keeps none of its records. kfake
// runs control functions on its one request loop, so only this loop's
// cost per request (decoding the request, not its records) stands between
// the client and its answer.
func discardProduce(c *kfake.Cluster) {
	next := map[string]map[int32]int64{}
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			key := t.Topic
			if key == "" {
				key = fmt.Sprintf("%x", t.TopicID)
			}
			if next[key] == nil {
				next[key] = map[int32]int64{}
			}
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.BaseOffset = next[key][p.Partition]
				rp.LogAppendTime = -1
				next[key][p.Partition] += countRecords(p.Records)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// countRecords counts the records of a produce request's batches (magic
// 2: the count is at byte 57 of each batch, whose length is at byte 8).
func countRecords(b []byte) int64 {
	var n int64
	for len(b) >= 61 {
		size := 12 + int(binary.BigEndian.Uint32(b[8:12]))
		if size < 61 || size > len(b) {
			break // not a whole batch: kfake's own checks are bypassed here
		}
		n += int64(binary.BigEndian.Uint32(b[57:61]))
		b = b[size:]
	}
	return n
}
