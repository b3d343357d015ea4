package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DeleteRecords moves partitions' log start offsets forward.
func init() {
	register(apiDef[*kmsg.DeleteRecordsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 2},
		serve: func(b *Broker, _ *conn, r *kmsg.DeleteRecordsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDeleteRecords(r), nil
		},
		authorize: func(z *authz, r *kmsg.DeleteRecordsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perTopic(z, r, r.Topics, func(t kmsg.DeleteRecordsRequestTopic) string { return t.Topic }, opDelete, run)
		},
		onFollower: refuseWith[*kmsg.DeleteRecordsRequest](errNotLeaderOrFollower),
	})
}
