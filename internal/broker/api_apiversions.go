package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ApiVersions advertises the registered APIs and their versions, and the
// transaction.version feature.
func init() {
	register(apiDef[*kmsg.ApiVersionsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, cn *conn, r *kmsg.ApiVersionsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleApiVersions(cn, r), nil
		},
		authorize: allowAll[*kmsg.ApiVersionsRequest],
	})
}

func (b *Broker) handleApiVersions(cn *conn, r *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	if r.Version >= 3 && r.ClientSoftwareName != "" {
		cn.log.Info("client software", "name", r.ClientSoftwareName, "version", r.ClientSoftwareVersion)
	}
	resp.ApiKeys = protocol.ApiKeys(versions)
	if r.Version >= 3 {
		// KIP-890 transactions v2: clients bump the epoch every
		// transaction and add partitions implicitly with Produce v12.
		resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{{Name: "transaction.version", MinVersion: 0, MaxVersion: 2}}
		resp.FinalizedFeaturesEpoch = 1
		resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{{Name: "transaction.version", MinVersionLevel: 2, MaxVersionLevel: 2}}
	}
	return resp
}
