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
			codes := make([]int16, len(r.Resources))
			for i, res := range r.Resources {
				codes[i] = z.configCode(opAlterConfigs, res.ResourceType, res.ResourceName)
			}
			resp, wait := splitRun(r, "Resources", "Resources", codes, run)
			return resp, wait, true
		},
		forwardable: forwardAlways[*kmsg.AlterConfigsRequest],
		onFollower:  refuseWith[*kmsg.AlterConfigsRequest](errNotController),
	})
}
