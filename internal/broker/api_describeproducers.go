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
