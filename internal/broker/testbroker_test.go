package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// openTestBroker opens a single-node broker on a fresh directory, without
// a client listener; edits change the default config first.
func openTestBroker(t *testing.T, edits ...func(*config.Server)) *Broker {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	for _, edit := range edits {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// plainProduce is a produce request of one record, value, to each of
// topic's partitions, in one batch each, from no idempotent producer.
func plainProduce(t *testing.T, topic string, partitions int32, acks int16, value string) *kmsg.ProduceRequest {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for i := int32(0); i < partitions; i++ {
		batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte(value)}})
		if err != nil {
			t.Fatal(err)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = i, batch
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}
