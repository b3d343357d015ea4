package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeConfigs describes topic and broker configs; each replica
// answers from its own copy.
func init() {
	register(apiDef[*kmsg.DescribeConfigsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeConfigsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeConfigs(r), nil
		},
		authorize: func(z *authz, r *kmsg.DescribeConfigsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perResource(z, r, r.Resources, func(res kmsg.DescribeConfigsRequestResource) (kmsg.ConfigResourceType, string) {
				return res.ResourceType, res.ResourceName
			}, opDescribeConfigs, run)
		},
	})
}
