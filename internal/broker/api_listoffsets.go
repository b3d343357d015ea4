package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ListOffsets answers the offsets of partitions at times (earliest,
// latest, a timestamp, the max timestamp) on the partition leader.
func init() {
	register(apiDef[*kmsg.ListOffsetsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 8},
		serve: func(b *Broker, _ *conn, r *kmsg.ListOffsetsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleListOffsets(r), nil
		},
		authorize: func(z *authz, r *kmsg.ListOffsetsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perTopic(z, r, r.Topics, func(t kmsg.ListOffsetsRequestTopic) string { return t.Topic }, opDescribe, run)
		},
		onFollower: refuseWith[*kmsg.ListOffsetsRequest](errNotLeaderOrFollower),
	})
}
