package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// Metadata names the brokers, the controller and each topic's partitions
// with their leader and replicas. Asking to create a topic that does not
// exist creates it (Server.AutoCreateTopics), on the leader.
func init() {
	register(apiDef[*kmsg.MetadataRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 12},
		serve: func(b *Broker, _ *conn, r *kmsg.MetadataRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleMetadata(r), nil
		},
		authorize: func(z *authz, r *kmsg.MetadataRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			return z.metadata(r), nil, true
		},
		forwardable: forwardAlways[*kmsg.MetadataRequest],
		forwardNow:  (*Broker).metadataForwards,
	})
}

// metadataForwards reports whether a follower sends a Metadata request to
// the leader: only when it names a topic this replica lacks and asks for
// auto-creation, which only the leader can do (a Kafka broker that is not
// the controller creates it through the controller, so a producer
// bootstrapped with any broker may write to a new topic). Otherwise the
// follower answers from its own copy.
func (b *Broker) metadataForwards(q *kmsg.MetadataRequest) bool {
	if b.cfg.AutoCreateTopics == nil || !*b.cfg.AutoCreateTopics || !(q.AllowAutoTopicCreation || q.Version < 4) {
		return false
	}
	if b.cl != nil {
		return false // any broker proposes the topic to the metadata log
	}
	for _, t := range q.Topics {
		if t.Topic != nil && b.lookup(*t.Topic) == nil {
			return true
		}
	}
	return false
}

func (b *Broker) handleMetadata(r *kmsg.MetadataRequest) kmsg.Response {
	if b.cl != nil {
		return b.cl.metadata(r, true)
	}
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	host, port := b.Advertised()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: b.nodeID, Host: host, Port: port}}
	id := b.clusterID
	resp.ClusterID = &id
	resp.ControllerID = b.nodeID
	leader := int32(-1)
	if b.repl != nil {
		leader = b.repl.namedLeader()
		resp.Brokers = resp.Brokers[:0]
		for _, e := range b.repl.endpoints() {
			resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: e.id, Host: e.host, Port: e.port})
		}
		resp.ControllerID = b.repl.leaderID()
	}

	var ts []*topic
	var missing []kmsg.MetadataResponseTopic
	if r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0) {
		ts = b.sortedTopics()
	} else {
		// Before v4 there is no AllowAutoTopicCreation and Kafka creates.
		allow := (r.AllowAutoTopicCreation || r.Version < 4) && !b.following()
		for _, rt := range r.Topics {
			var t *topic
			var code int16
			switch {
			case rt.Topic != nil:
				t, code = b.lookupOrCreate(*rt.Topic, allow)
			case rt.TopicID != [16]byte{}:
				b.mu.RLock()
				t = b.byID[rt.TopicID]
				b.mu.RUnlock()
				code = errUnknownTopicID
			default:
				code = errInvalidRequest
			}
			if t == nil && code == errUnknownTopicOrPartition && b.following() {
				// A follower's topic list lags the leader's by up to a
				// manifest round: "not available yet" makes the client
				// ask again (and reach the leader) instead of failing
				// records for a topic the leader already has.
				code = errLeaderNotAvailable
			}
			if t == nil {
				missing = append(missing, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: rt.Topic, TopicID: rt.TopicID})
				continue
			}
			ts = append(ts, t)
		}
	}
	for _, t := range ts {
		name := t.name
		mt := kmsg.MetadataResponseTopic{Topic: &name, TopicID: t.id, IsInternal: internalTopic(name)}
		for _, p := range t.partitions {
			mp := kmsg.MetadataResponseTopicPartition{
				Partition:   p.Index,
				Leader:      b.nodeID,
				LeaderEpoch: b.exposedEpoch(p),
				Replicas:    []int32{b.nodeID},
				ISR:         []int32{b.nodeID},
			}
			if b.repl != nil {
				mp.Leader, mp.Replicas, mp.ISR = leader, b.repl.ids, b.repl.counted(p)
			}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.Topics = append(resp.Topics, missing...)
	return resp
}

// metadata answers Metadata with the topics the principal may not describe
// refused (named ones) or left out (a listing of all), and auto-creation
// only where it may create.
func (z *authz) metadata(r *kmsg.MetadataRequest) kmsg.Response {
	b := z.b
	if r.Topics == nil || r.Version == 0 && len(r.Topics) == 0 {
		resp := b.handleMetadata(r).(*kmsg.MetadataResponse)
		kept := resp.Topics[:0]
		for _, t := range resp.Topics {
			if t.Topic != nil && z.visible(opDescribe, resTopic, *t.Topic) {
				kept = append(kept, t)
			}
		}
		resp.Topics = kept
		return resp
	}
	filtered := *r
	filtered.Topics = []kmsg.MetadataRequestTopic{}
	var denied []kmsg.MetadataResponseTopic
	for _, rt := range r.Topics {
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		} else if t := b.topicByID(rt.TopicID); t != nil {
			name = t.name
		}
		code := int16(0)
		switch {
		case name == "":
		case !z.allowed(opDescribe, resTopic, name):
			code = errTopicAuthorizationFailed
		case b.lookup(name) == nil && (r.AllowAutoTopicCreation || r.Version < 4) && !z.mayCreate(name):
			code = errUnknownTopicOrPartition
		}
		if code != 0 {
			denied = append(denied, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: rt.Topic, TopicID: rt.TopicID})
			continue
		}
		filtered.Topics = append(filtered.Topics, rt)
	}
	resp := b.handleMetadata(&filtered).(*kmsg.MetadataResponse)
	if len(filtered.Topics) == 0 {
		resp.Topics = nil // version 0 reads an empty list as "all"
	}
	resp.Topics = append(resp.Topics, denied...)
	return resp
}
