package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// AlterConfigs replaces topic configs; only the leader can, so a follower
// forwards it.
func init() {
	register(apiDef[*kmsg.AlterConfigsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 2},
		serve: func(b *Broker, _ *conn, r *kmsg.AlterConfigsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleAlterConfigs(r), nil
		},
		authorize: func(z *authz, r *kmsg.AlterConfigsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perResource(z, r, r.Resources, func(res kmsg.AlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
				return res.ResourceType, res.ResourceName
			}, opAlterConfigs, run)
		},
		forwardable: forwardAlways[*kmsg.AlterConfigsRequest],
		onFollower:  refuseWith[*kmsg.AlterConfigsRequest](errNotController),
	})
}
