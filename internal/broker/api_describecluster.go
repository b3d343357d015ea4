package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeCluster names the cluster id, the controller and the brokers.
func init() {
	register(apiDef[*kmsg.DescribeClusterRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 1},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeClusterRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeCluster(r), nil
		},
		authorize: allowAll[*kmsg.DescribeClusterRequest],
	})
}

func (b *Broker) handleDescribeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	host, port := b.Advertised()
	resp.ClusterID = b.clusterID
	resp.ControllerID = b.nodeID
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{{NodeID: b.nodeID, Host: host, Port: port}}
	if b.repl != nil {
		resp.ControllerID = b.repl.leaderID()
		resp.Brokers = resp.Brokers[:0]
		for _, e := range b.repl.endpoints() {
			resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: e.id, Host: e.host, Port: e.port})
		}
	}
	if b.cl != nil {
		b.cl.describeCluster(resp)
	}
	return resp
}
