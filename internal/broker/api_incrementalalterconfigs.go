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
			codes := make([]int16, len(r.Resources))
			for i, res := range r.Resources {
				codes[i] = z.configCode(opAlterConfigs, res.ResourceType, res.ResourceName)
			}
			resp, wait := splitRun(r, "Resources", "Resources", codes, run)
			return resp, wait, true
		},
		forwardable: forwardAlways[*kmsg.IncrementalAlterConfigsRequest],
		onFollower:  refuseWith[*kmsg.IncrementalAlterConfigsRequest](errNotController),
	})
}
