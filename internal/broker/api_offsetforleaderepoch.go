package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// OffsetForLeaderEpoch answers where a leader epoch ended, for clients
// that check their position after a leader change (KIP-320).
func init() {
	register(apiDef[*kmsg.OffsetForLeaderEpochRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, _ *conn, r *kmsg.OffsetForLeaderEpochRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleOffsetForLeaderEpoch(r), nil
		},
		authorize: func(z *authz, r *kmsg.OffsetForLeaderEpochRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perTopic(z, r, r.Topics, func(t kmsg.OffsetForLeaderEpochRequestTopic) string { return t.Topic }, opDescribe, run)
		},
		onFollower: refuseWith[*kmsg.OffsetForLeaderEpochRequest](errNotLeaderOrFollower),
	})
}
