package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ConsumerGroupHeartbeat is the KIP-848 consumer group protocol: joining,
// heartbeats and assignments in one request (v1: client-generated member
// ids, regex subscriptions).
func init() {
	register(apiDef[*kmsg.ConsumerGroupHeartbeatRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 1},
		serve: func(b *Broker, cn *conn, r *kmsg.ConsumerGroupHeartbeatRequest, req protocol.Request) (kmsg.Response, waitFunc) {
			clientID := ""
			if req.ClientID != nil {
				clientID = *req.ClientID
			}
			return b.groups.ConsumerGroupHeartbeat(r, b.groupTopics(), clientID, cn.host()), nil
		},
		authorize: func(z *authz, r *kmsg.ConsumerGroupHeartbeatRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if !z.allowed(opRead, resGroup, r.Group) {
				return denyAll(r, errGroupAuthorizationFailed), nil, true
			}
			// As Kafka: a named topic the member may not describe fails
			// the heartbeat. A regex is resolved for the whole group, over
			// every topic: filtering it by each member's ACLs would give
			// members different views and bump the group epoch back and
			// forth.
			for _, t := range r.SubscribedTopicNames {
				if !z.allowed(opDescribe, resTopic, t) {
					return denyAll(r, errTopicAuthorizationFailed), nil, true
				}
			}
			return nil, nil, false
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.ConsumerGroupHeartbeatRequest],
		coordinator: groupKey(func(r *kmsg.ConsumerGroupHeartbeatRequest) string { return r.Group }),
	})
}
