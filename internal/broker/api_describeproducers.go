package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeProducers lists the producers writing to partitions, with their
// open transactions (kafka-transactions describe-producers).
func init() {
	register(apiDef[*kmsg.DescribeProducersRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeProducersRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeProducers(r), nil
		},
		authorize: func(z *authz, r *kmsg.DescribeProducersRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perTopic(z, r, r.Topics, func(t kmsg.DescribeProducersRequestTopic) string { return t.Topic }, opRead, run)
		},
		onFollower: refuseWith[*kmsg.DescribeProducersRequest](errNotLeaderOrFollower),
	})
}

func (b *Broker) handleDescribeProducers(r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range r.Topics {
		out := kmsg.DescribeProducersResponseTopic{Topic: rt.Topic}
		for _, pi := range rt.Partitions {
			op := kmsg.NewDescribeProducersResponseTopicPartition()
			op.Partition = pi
			p, code := b.partitionOf(rt.Topic, pi)
			if code != 0 {
				op.ErrorCode = code
				out.Partitions = append(out.Partitions, op)
				continue
			}
			producers, open := p.Producers()
			for _, pr := range producers {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = pr.ID, int32(pr.Epoch), pr.LastSequence
				ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = pr.LastMs, 0, -1
				if first, ok := open[pr.ID]; ok {
					ap.CurrentTxnStartOffset = first
					delete(open, pr.ID)
				}
				op.ActiveProducers = append(op.ActiveProducers, ap)
			}
			for id, first := range open {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.LastSequence, ap.LastTimestamp, ap.CurrentTxnStartOffset = id, -1, -1, first
				op.ActiveProducers = append(op.ActiveProducers, ap)
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}
