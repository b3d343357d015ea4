package broker

import (
	"context"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// handle answers one request. A request that must wait (acks=all produce,
// long-poll fetch) returns a wait function instead of a response; the
// connection runs it on its own goroutine.
func (b *Broker) handle(cn *conn, req protocol.Request) (kmsg.Response, func(context.Context) kmsg.Response) {
	if b.following() && !cn.viaForward && b.forwardsToLeader(req.Body) {
		return nil, func(ctx context.Context) kmsg.Response { return b.forward(ctx, cn, req) }
	}
	if b.following() && !readsSecurityState(req) {
		if resp, refused := b.securityOnFollower(req); refused {
			return resp, nil
		}
		if resp, refused := b.refuseOnFollower(req); refused {
			return resp, nil
		}
	}
	if resp, wait, handled := b.authorizeRequest(cn, req); handled {
		return resp, wait
	}
	return b.serve(cn, req)
}

// serve runs a request's handler; the request has passed the follower
// and ACL checks (authorizeRequest calls it with the allowed part).
func (b *Broker) serve(cn *conn, req protocol.Request) (kmsg.Response, func(context.Context) kmsg.Response) {
	switch r := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		return b.handleApiVersions(cn, r), nil
	case *kmsg.MetadataRequest:
		return b.handleMetadata(r), nil
	case *kmsg.ProduceRequest:
		return b.handleProduce(r)
	case *kmsg.FetchRequest:
		return b.fetchFiltered(r, func(topic string) bool { return !secretTopic(topic) })
	case *kmsg.ListOffsetsRequest:
		return b.handleListOffsets(r), nil
	case *kmsg.CreateTopicsRequest:
		return b.handleCreateTopics(r), nil
	case *kmsg.DeleteTopicsRequest:
		return b.handleDeleteTopics(r), nil
	case *kmsg.CreatePartitionsRequest:
		return b.handleCreatePartitions(r), nil
	case *kmsg.DescribeConfigsRequest:
		return b.handleDescribeConfigs(r), nil
	case *kmsg.AlterConfigsRequest:
		return b.handleAlterConfigs(r), nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return b.handleIncrementalAlterConfigs(r), nil
	case *kmsg.DeleteRecordsRequest:
		return b.handleDeleteRecords(r), nil
	case *kmsg.DescribeClusterRequest:
		return b.handleDescribeCluster(r), nil
	case *kmsg.DescribeLogDirsRequest:
		return b.handleDescribeLogDirs(r), nil
	case *kmsg.OffsetForLeaderEpochRequest:
		return b.handleOffsetForLeaderEpoch(r), nil
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			return nil, func(ctx context.Context) kmsg.Response { return b.handleInitProducerIDTxn(ctx, r) }
		}
		return nil, func(context.Context) kmsg.Response { return b.handleInitProducerID(r) }
	case *kmsg.AddPartitionsToTxnRequest:
		return nil, func(ctx context.Context) kmsg.Response { return b.handleAddPartitionsToTxn(ctx, r) }
	case *kmsg.AddOffsetsToTxnRequest:
		return nil, func(ctx context.Context) kmsg.Response { return b.handleAddOffsetsToTxn(ctx, r) }
	case *kmsg.EndTxnRequest:
		return nil, func(ctx context.Context) kmsg.Response { return b.handleEndTxn(ctx, r) }
	case *kmsg.TxnOffsetCommitRequest:
		return nil, func(ctx context.Context) kmsg.Response { return b.handleTxnOffsetCommit(ctx, r) }
	case *kmsg.DescribeTransactionsRequest:
		return b.handleDescribeTransactions(r), nil
	case *kmsg.ListTransactionsRequest:
		return b.handleListTransactions(r), nil
	case *kmsg.DescribeProducersRequest:
		return b.handleDescribeProducers(r), nil
	case *kmsg.FindCoordinatorRequest:
		return b.handleFindCoordinator(r), nil
	case *kmsg.OffsetCommitRequest:
		return b.handleOffsetCommit(r)
	case *kmsg.OffsetFetchRequest:
		return b.handleOffsetFetch(r), nil
	case *kmsg.OffsetDeleteRequest:
		return b.handleOffsetDelete(r)
	case *kmsg.JoinGroupRequest:
		clientID, host := "", cn.host()
		if req.ClientID != nil {
			clientID = *req.ClientID
		}
		return nil, func(ctx context.Context) kmsg.Response { return b.groups.JoinGroup(ctx, r, clientID, host) }
	case *kmsg.SyncGroupRequest:
		return nil, func(ctx context.Context) kmsg.Response { return b.groups.SyncGroup(ctx, r) }
	case *kmsg.HeartbeatRequest:
		return b.groups.Heartbeat(r), nil
	case *kmsg.LeaveGroupRequest:
		return b.groups.LeaveGroup(r), nil
	case *kmsg.DescribeGroupsRequest:
		return b.groups.DescribeGroups(r), nil
	case *kmsg.ListGroupsRequest:
		return b.groups.ListGroups(r), nil
	case *kmsg.DeleteGroupsRequest:
		return b.handleDeleteGroups(r)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		clientID := ""
		if req.ClientID != nil {
			clientID = *req.ClientID
		}
		return b.groups.ConsumerGroupHeartbeat(r, b.groupTopics(), clientID, cn.host()), nil
	case *kmsg.ConsumerGroupDescribeRequest:
		return b.groups.ConsumerGroupDescribe(r, b.groupTopics()), nil
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		return b.handleDescribeUserScramCredentials(r), nil
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		who := cn.aclPrincipal()
		return nil, func(ctx context.Context) kmsg.Response { return b.handleAlterUserScramCredentials(ctx, r, who) }
	case *kmsg.DescribeACLsRequest:
		return b.handleDescribeAcls(r), nil
	case *kmsg.CreateACLsRequest:
		who := cn.aclPrincipal()
		return nil, func(ctx context.Context) kmsg.Response { return b.handleCreateAcls(ctx, r, who) }
	case *kmsg.DeleteACLsRequest:
		who := cn.aclPrincipal()
		return nil, func(ctx context.Context) kmsg.Response { return b.handleDeleteAcls(ctx, r, who) }
	}
	// ParseRequest only lets through keys in the versions table, and every
	// key there has a case above.
	panic("broker: no handler for " + kmsg.NameForKey(req.Key))
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

// Advertised is the host and port clients are told to dial.
func (b *Broker) Advertised() (string, int32) {
	addr := b.cfg.AdvertisedAddress
	if addr == "" && b.cfg.Replication != nil && b.cfg.Replication.Enabled {
		addr = b.cfg.Replication.ClientAddress
	}
	if addr == "" {
		addr = b.cfg.ClientListenAddr()
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	if b.boundPort != 0 && b.cfg.Port == 0 && b.cfg.AdvertisedAddress == "" {
		p = b.boundPort
	}
	return host, int32(p)
}

func (b *Broker) handleMetadata(r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	host, port := b.Advertised()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: b.nodeID, Host: host, Port: port}}
	id := b.clusterID
	resp.ClusterID = &id
	resp.ControllerID = b.nodeID
	if b.repl != nil {
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
				LeaderEpoch: b.epoch.Load(),
				Replicas:    []int32{b.nodeID},
				ISR:         []int32{b.nodeID},
			}
			if b.repl != nil {
				mp.Leader, mp.Replicas, mp.ISR = b.repl.leaderID(), b.repl.ids, b.repl.counted(p)
			}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.Topics = append(resp.Topics, missing...)
	return resp
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
	return resp
}
