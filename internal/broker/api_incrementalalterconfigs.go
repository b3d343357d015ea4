package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// IncrementalAlterConfigs changes single topic configs; only the leader
// can, so a follower forwards it.
func init() {
	register(apiDef[*kmsg.IncrementalAlterConfigsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 1},
		serve: func(b *Broker, _ *conn, r *kmsg.IncrementalAlterConfigsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleIncrementalAlterConfigs(r), nil
		},
		authorize: func(z *authz, r *kmsg.IncrementalAlterConfigsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perResource(z, r, r.Resources, func(res kmsg.IncrementalAlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
				return res.ResourceType, res.ResourceName
			}, opAlterConfigs, run)
		},
		forwardable: forwardAlways[*kmsg.IncrementalAlterConfigsRequest],
		onFollower:  refuseWith[*kmsg.IncrementalAlterConfigsRequest](errNotController),
	})
}
