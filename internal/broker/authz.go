package broker

import (
	"context"
	"reflect"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// Short names for the ACL vocabulary.
const (
	opRead            = kmsg.ACLOperationRead
	opWrite           = kmsg.ACLOperationWrite
	opCreate          = kmsg.ACLOperationCreate
	opDelete          = kmsg.ACLOperationDelete
	opAlter           = kmsg.ACLOperationAlter
	opDescribe        = kmsg.ACLOperationDescribe
	opDescribeConfigs = kmsg.ACLOperationDescribeConfigs
	opAlterConfigs    = kmsg.ACLOperationAlterConfigs
	opIdempotentWrite = kmsg.ACLOperationIdempotentWrite

	resTopic   = kmsg.ACLResourceTypeTopic
	resGroup   = kmsg.ACLResourceTypeGroup
	resCluster = kmsg.ACLResourceTypeCluster
	resTxnID   = kmsg.ACLResourceTypeTransactionalId
)

type waitFunc = func(context.Context) kmsg.Response

// authz decides one request of one connection.
type authz struct {
	b         *Broker
	cn        *conn
	principal string
	host      string
	api       string
}

// allowIfNoACL is Server.AllowEveryoneIfNoAclFound (default true).
func (b *Broker) allowIfNoACL() bool {
	return b.cfg.AllowEveryoneIfNoAclFound == nil || *b.cfg.AllowEveryoneIfNoAclFound
}

// superUser reports whether a principal bypasses ACLs.
func (s *security) superUser(principal string) bool {
	_, ok := s.superUsers[principal]
	return ok
}

func (z *authz) allowed(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if z.b.sec.acls.authorize(z.principal, z.host, op, rt, name, z.b.allowIfNoACL()) {
		return true
	}
	z.cn.logDenied(z.api, op, rt, name)
	return false
}

// visible is allowed without a log line, for listings that just leave
// out what the principal may not see (as Kafka does).
func (z *authz) visible(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	return z.b.sec.acls.authorize(z.principal, z.host, op, rt, name, z.b.allowIfNoACL())
}

// topicCode is 0 if op on the topic is allowed, else its error code.
func (z *authz) topicCode(op kmsg.ACLOperation, topic string) int16 {
	if z.allowed(op, resTopic, topic) {
		return 0
	}
	return errTopicAuthorizationFailed
}

// mayCreate reports whether the principal may create the topic (CREATE on
// the cluster or on the topic), logging a denial.
func (z *authz) mayCreate(topic string) bool {
	if z.visible(opCreate, resCluster, clusterResource) || z.visible(opCreate, resTopic, topic) {
		return true
	}
	z.cn.logDenied(z.api, opCreate, resTopic, topic)
	return false
}

// logDenied logs a denial once per connection, operation and resource, so
// a retrying client does not flood the log.
func (cn *conn) logDenied(api string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) {
	key := deniedKey{op, rt, name}
	cn.deniedMu.Lock()
	if cn.denied == nil {
		cn.denied = map[deniedKey]bool{}
	}
	seen := cn.denied[key]
	if !seen && len(cn.denied) < 256 {
		cn.denied[key] = true
	}
	cn.deniedMu.Unlock()
	if !seen {
		cn.log.Info("authorization denied", "principal", cn.aclPrincipal(), "api", api, "operation", op.String(),
			"resource_type", rt.String(), "resource", name, "client_id", cn.client)
	}
}

type deniedKey struct {
	op   kmsg.ACLOperation
	rt   kmsg.ACLResourceType
	name string
}

// deniedLog is the per-connection memory behind logDenied; handlers of one
// connection may run on several goroutines.
type deniedLog struct {
	deniedMu sync.Mutex
	denied   map[deniedKey]bool
}

// authorizeRequest applies the ACLs to a request. It returns handled=false
// when the request may run as it is; otherwise the answer (or wait) it
// returns already has the denied parts refused and the allowed parts
// served.
func (b *Broker) authorizeRequest(cn *conn, req protocol.Request) (kmsg.Response, waitFunc, bool) {
	principal := cn.aclPrincipal()
	if b.sec.superUser(principal) {
		return nil, nil, false
	}
	b.refreshACLs()
	if b.sec.acls.len() == 0 && b.allowIfNoACL() {
		return nil, nil, false
	}
	z := &authz{b: b, cn: cn, principal: principal, host: cn.ip(), api: kmsg.NameForKey(req.Key)}
	run := func(body kmsg.Request) (kmsg.Response, waitFunc) {
		filtered := req
		filtered.Body = body
		return b.serve(cn, filtered)
	}
	whole := func(ok bool, code int16) (kmsg.Response, waitFunc, bool) {
		if ok {
			return nil, nil, false
		}
		return denyAll(req.Body, code), nil, true
	}
	cluster := func(op kmsg.ACLOperation) bool { return z.allowed(op, resCluster, clusterResource) }

	switch r := req.Body.(type) {
	case *kmsg.ApiVersionsRequest, *kmsg.DescribeClusterRequest:
		return nil, nil, false
	case *kmsg.MetadataRequest:
		resp := z.metadata(r)
		return resp, nil, true
	case *kmsg.ProduceRequest:
		resp, wait := z.produce(r, run)
		return resp, wait, true
	case *kmsg.FetchRequest:
		resp, wait := b.fetchFiltered(r, func(t string) bool { return !secretTopic(t) && z.allowed(opRead, resTopic, t) })
		return resp, wait, true
	case *kmsg.ListOffsetsRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opDescribe, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.OffsetForLeaderEpochRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opDescribe, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.DeleteRecordsRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opDelete, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.DescribeProducersRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opRead, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.CreateTopicsRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			if !z.mayCreate(t.Topic) {
				codes[i] = errTopicAuthorizationFailed
			}
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.DeleteTopicsRequest:
		if r.Version < 6 {
			// Names only: splitRun's mirroring needs entries of the
			// same name in the request and the answer.
			filtered := *r
			filtered.TopicNames = []string{}
			var denied []kmsg.DeleteTopicsResponseTopic
			for _, name := range r.TopicNames {
				if z.topicCode(opDelete, name) == 0 {
					filtered.TopicNames = append(filtered.TopicNames, name)
					continue
				}
				dt := kmsg.NewDeleteTopicsResponseTopic()
				dt.Topic, dt.ErrorCode = kmsg.StringPtr(name), errTopicAuthorizationFailed
				denied = append(denied, dt)
			}
			if len(denied) == 0 {
				return nil, nil, false
			}
			resp, wait := run(&filtered)
			resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
				d := resp.(*kmsg.DeleteTopicsResponse)
				d.Topics = append(d.Topics, denied...)
				return d
			})
			return resp, wait, true
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			} else if tp := b.topicByID(t.TopicID); tp != nil {
				name = tp.name
			}
			if name != "" {
				codes[i] = z.topicCode(opDelete, name)
			}
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.CreatePartitionsRequest:
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opAlter, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.DescribeConfigsRequest:
		codes := make([]int16, len(r.Resources))
		for i, res := range r.Resources {
			codes[i] = z.configCode(opDescribeConfigs, res.ResourceType, res.ResourceName)
		}
		resp, wait := splitRun(r, "Resources", "Resources", codes, run)
		return resp, wait, true
	case *kmsg.AlterConfigsRequest:
		codes := make([]int16, len(r.Resources))
		for i, res := range r.Resources {
			codes[i] = z.configCode(opAlterConfigs, res.ResourceType, res.ResourceName)
		}
		resp, wait := splitRun(r, "Resources", "Resources", codes, run)
		return resp, wait, true
	case *kmsg.IncrementalAlterConfigsRequest:
		codes := make([]int16, len(r.Resources))
		for i, res := range r.Resources {
			codes[i] = z.configCode(opAlterConfigs, res.ResourceType, res.ResourceName)
		}
		resp, wait := splitRun(r, "Resources", "Resources", codes, run)
		return resp, wait, true

	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			return whole(z.allowed(opWrite, resTxnID, *r.TransactionalID), errTxnIDAuthorizationFailed)
		}
		// An idempotent producer: IDEMPOTENT_WRITE on the cluster, or
		// (Kafka 3.0+) WRITE on any topic, where a topic no ACL names
		// counts when AllowEveryoneIfNoAclFound is on: Kafka asks about
		// a made-up topic name for that, so do we.
		ok := z.visible(opIdempotentWrite, resCluster, clusterResource) ||
			b.sec.acls.allowsAny(principal, z.host, opWrite, resTopic) ||
			z.visible(opWrite, resTopic, "\x00no topic has this name")
		if !ok {
			cn.logDenied(z.api, opIdempotentWrite, resCluster, clusterResource)
		}
		return whole(ok, errClusterAuthorizationFailed)
	case *kmsg.AddPartitionsToTxnRequest:
		if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
			return denyAll(r, errTxnIDAuthorizationFailed), nil, true
		}
		// All or nothing, as in Kafka: the allowed topics are not added
		// either.
		denied := false
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opWrite, t.Topic)
			denied = denied || codes[i] != 0
		}
		if !denied {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for i, t := range r.Topics {
			code := codes[i]
			if code == 0 {
				code = errOperationNotAttempted
			}
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	case *kmsg.AddOffsetsToTxnRequest:
		if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
			return denyAll(r, errTxnIDAuthorizationFailed), nil, true
		}
		return whole(z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
	case *kmsg.EndTxnRequest:
		return whole(z.allowed(opWrite, resTxnID, r.TransactionalID), errTxnIDAuthorizationFailed)
	case *kmsg.TxnOffsetCommitRequest:
		if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
			return denyAll(r, errTxnIDAuthorizationFailed), nil, true
		}
		if !z.allowed(opRead, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil, true
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opRead, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.DescribeTransactionsRequest:
		var kept []string
		var denied []kmsg.DescribeTransactionsResponseTransactionState
		for _, id := range r.TransactionalIDs {
			if z.allowed(opDescribe, resTxnID, id) {
				kept = append(kept, id)
				continue
			}
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode = id, errTxnIDAuthorizationFailed
			denied = append(denied, st)
		}
		if len(denied) == 0 {
			return nil, nil, false
		}
		filtered := *r
		filtered.TransactionalIDs = append([]string{}, kept...)
		resp, wait := run(&filtered)
		merge := func(resp kmsg.Response) kmsg.Response {
			if d, ok := resp.(*kmsg.DescribeTransactionsResponse); ok {
				d.TransactionStates = append(d.TransactionStates, denied...)
			}
			return resp
		}
		resp, wait = afterRun(resp, wait, merge)
		return resp, wait, true
	case *kmsg.ListTransactionsRequest:
		resp, wait := run(r)
		resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
			if l, ok := resp.(*kmsg.ListTransactionsResponse); ok {
				kept := l.TransactionStates[:0]
				for _, st := range l.TransactionStates {
					if z.visible(opDescribe, resTxnID, st.TransactionalID) {
						kept = append(kept, st)
					}
				}
				l.TransactionStates = kept
			}
			return resp
		})
		return resp, wait, true

	case *kmsg.FindCoordinatorRequest:
		resp := z.findCoordinator(r, run)
		if resp == nil {
			return nil, nil, false
		}
		return resp, nil, true
	case *kmsg.OffsetCommitRequest:
		if !z.allowed(opRead, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil, true
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opRead, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.OffsetFetchRequest:
		resp, wait := z.offsetFetch(r, run)
		return resp, wait, true
	case *kmsg.OffsetDeleteRequest:
		if !z.allowed(opDelete, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil, true
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opRead, t.Topic)
		}
		resp, wait := splitRun(r, "Topics", "Topics", codes, run)
		return resp, wait, true
	case *kmsg.JoinGroupRequest:
		return whole(z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
	case *kmsg.SyncGroupRequest:
		return whole(z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
	case *kmsg.HeartbeatRequest:
		return whole(z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
	case *kmsg.LeaveGroupRequest:
		return whole(z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
	case *kmsg.DescribeGroupsRequest:
		codes := make([]int16, len(r.Groups))
		for i, g := range r.Groups {
			if !z.allowed(opDescribe, resGroup, g) {
				codes[i] = errGroupAuthorizationFailed
			}
		}
		resp, wait := splitRun(r, "Groups", "Groups", codes, run)
		return resp, wait, true
	case *kmsg.ConsumerGroupHeartbeatRequest:
		if !z.allowed(opRead, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil, true
		}
		// As Kafka: a named topic the member may not describe fails the
		// heartbeat. A regex is resolved for the whole group, over every
		// topic: filtering it by each member's ACLs would give members
		// different views and bump the group epoch back and forth.
		for _, t := range r.SubscribedTopicNames {
			if !z.allowed(opDescribe, resTopic, t) {
				return denyAll(r, errTopicAuthorizationFailed), nil, true
			}
		}
		return nil, nil, false
	case *kmsg.ConsumerGroupDescribeRequest:
		codes := make([]int16, len(r.Groups))
		for i, g := range r.Groups {
			if !z.allowed(opDescribe, resGroup, g) {
				codes[i] = errGroupAuthorizationFailed
			}
		}
		resp, wait := splitRun(r, "Groups", "Groups", codes, run)
		return resp, wait, true
	case *kmsg.DeleteGroupsRequest:
		codes := make([]int16, len(r.Groups))
		for i, g := range r.Groups {
			if !z.allowed(opDelete, resGroup, g) {
				codes[i] = errGroupAuthorizationFailed
			}
		}
		resp, wait := splitRun(r, "Groups", "Groups", codes, run)
		return resp, wait, true
	case *kmsg.ListGroupsRequest:
		if z.visible(opDescribe, resCluster, clusterResource) {
			return nil, nil, false
		}
		resp, wait := run(r)
		resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
			if l, ok := resp.(*kmsg.ListGroupsResponse); ok {
				kept := l.Groups[:0]
				for _, g := range l.Groups {
					if z.visible(opDescribe, resGroup, g.Group) {
						kept = append(kept, g)
					}
				}
				l.Groups = kept
			}
			return resp
		})
		return resp, wait, true

	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		return whole(cluster(opDescribe), errClusterAuthorizationFailed)
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		if cluster(opAlter) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		add := func(user string) {
			if !seen[user] {
				seen[user] = true
				res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode = user, errClusterAuthorizationFailed
				resp.Results = append(resp.Results, res)
			}
		}
		for _, d := range r.Deletions {
			add(d.Name)
		}
		for _, u := range r.Upsertions {
			add(u.Name)
		}
		return resp, nil, true
	case *kmsg.DescribeACLsRequest:
		return whole(cluster(opDescribe), errClusterAuthorizationFailed)
	case *kmsg.DescribeLogDirsRequest:
		if cluster(opDescribe) {
			return nil, nil, false
		}
		// Kafka: the error from v3, an empty answer before.
		resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
		resp.ErrorCode = errClusterAuthorizationFailed
		return resp, nil, true
	case *kmsg.CreateACLsRequest:
		if cluster(opAlter) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
		resp.Results = make([]kmsg.CreateACLsResponseResult, len(r.Creations))
		for i := range resp.Results {
			resp.Results[i].ErrorCode = errClusterAuthorizationFailed
		}
		return resp, nil, true
	case *kmsg.DeleteACLsRequest:
		if cluster(opAlter) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
		resp.Results = make([]kmsg.DeleteACLsResponseResult, len(r.Filters))
		for i := range resp.Results {
			resp.Results[i].ErrorCode = errClusterAuthorizationFailed
		}
		return resp, nil, true
	}
	// An API without a rule above is refused rather than let through
	// unchecked.
	return denyAll(req.Body, errClusterAuthorizationFailed), nil, true
}

// configCode authorizes DescribeConfigs/AlterConfigs on a topic (type 2)
// or the broker (4, 8: the cluster).
func (z *authz) configCode(op kmsg.ACLOperation, typ kmsg.ConfigResourceType, name string) int16 {
	if typ == kmsg.ConfigResourceTypeTopic {
		return z.topicCode(op, name)
	}
	if z.allowed(op, resCluster, clusterResource) {
		return 0
	}
	return errClusterAuthorizationFailed
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

// produce refuses the topics the principal may not write (and may not
// create, when they do not exist yet).
func (z *authz) produce(r *kmsg.ProduceRequest, run func(kmsg.Request) (kmsg.Response, waitFunc)) (kmsg.Response, waitFunc) {
	if r.TransactionID != nil && !z.allowed(opWrite, resTxnID, *r.TransactionID) {
		if r.Acks == 0 {
			return acks0Failed, nil
		}
		return denyAll(r, errTxnIDAuthorizationFailed), nil
	}
	codes := make([]int16, len(r.Topics))
	denied := false
	for i, t := range r.Topics {
		codes[i] = z.topicCode(opWrite, t.Topic)
		if codes[i] == 0 && z.b.lookup(t.Topic) == nil && !z.mayCreate(t.Topic) {
			codes[i] = errUnknownTopicOrPartition
		}
		denied = denied || codes[i] != 0
	}
	if denied && r.Acks == 0 {
		// No answer to carry the error: close the connection, as for
		// any failed acks=0 produce.
		return acks0Failed, nil
	}
	return splitRun(r, "Topics", "Topics", codes, run)
}

// findCoordinator refuses keys the principal may not describe; nil means
// every key is allowed.
func (z *authz) findCoordinator(r *kmsg.FindCoordinatorRequest, run func(kmsg.Request) (kmsg.Response, waitFunc)) kmsg.Response {
	rt, code := resGroup, errGroupAuthorizationFailed
	if r.CoordinatorType == 1 {
		rt, code = resTxnID, errTxnIDAuthorizationFailed
	}
	if r.Version < 4 {
		if z.allowed(opDescribe, rt, r.CoordinatorKey) {
			return nil
		}
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = code, -1, -1
		return resp
	}
	var kept []string
	var denied []kmsg.FindCoordinatorResponseCoordinator
	for _, key := range r.CoordinatorKeys {
		if z.allowed(opDescribe, rt, key) {
			kept = append(kept, key)
			continue
		}
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.ErrorCode, c.NodeID, c.Port = key, code, -1, -1
		denied = append(denied, c)
	}
	if len(denied) == 0 {
		return nil
	}
	filtered := *r
	filtered.CoordinatorKeys = append([]string{}, kept...)
	resp, _ := run(&filtered)
	f := resp.(*kmsg.FindCoordinatorResponse)
	f.Coordinators = append(f.Coordinators, denied...)
	return f
}

// offsetFetch refuses groups the principal may not describe and topics it
// may not describe; a request for all of a group's topics leaves those out.
func (z *authz) offsetFetch(r *kmsg.OffsetFetchRequest, run func(kmsg.Request) (kmsg.Response, waitFunc)) (kmsg.Response, waitFunc) {
	deniedPartitions := func(parts []int32) []kmsg.OffsetFetchResponseGroupTopicPartition {
		var out []kmsg.OffsetFetchResponseGroupTopicPartition
		for _, p := range parts {
			op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			op.Partition, op.Offset, op.ErrorCode = p, -1, errTopicAuthorizationFailed
			out = append(out, op)
		}
		return out
	}
	if r.Version < 8 {
		if !z.allowed(opDescribe, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil
		}
		if r.Topics == nil {
			resp, wait := run(r)
			return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
				if o, ok := resp.(*kmsg.OffsetFetchResponse); ok {
					kept := o.Topics[:0]
					for _, t := range o.Topics {
						if z.visible(opDescribe, resTopic, t.Topic) {
							kept = append(kept, t)
						}
					}
					o.Topics = kept
				}
				return resp
			})
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opDescribe, t.Topic)
		}
		return splitRun(r, "Topics", "Topics", codes, run)
	}
	filtered := *r
	filtered.Groups = nil
	type extra struct {
		group  string
		code   int16
		topics []kmsg.OffsetFetchResponseGroupTopic
	}
	var extras []extra
	changed := false
	for _, g := range r.Groups {
		if !z.allowed(opDescribe, resGroup, g.Group) {
			extras = append(extras, extra{group: g.Group, code: errGroupAuthorizationFailed})
			changed = true
			continue
		}
		fg := g
		if g.Topics != nil {
			fg.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
			var deniedTopics []kmsg.OffsetFetchResponseGroupTopic
			for _, t := range g.Topics {
				if z.topicCode(opDescribe, t.Topic) == 0 {
					fg.Topics = append(fg.Topics, t)
					continue
				}
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic, rt.Partitions = t.Topic, deniedPartitions(t.Partitions)
				deniedTopics = append(deniedTopics, rt)
			}
			if len(deniedTopics) > 0 {
				extras = append(extras, extra{group: g.Group, topics: deniedTopics})
				changed = true
			}
		}
		filtered.Groups = append(filtered.Groups, fg)
	}
	allTopics := false
	for _, g := range r.Groups {
		allTopics = allTopics || g.Topics == nil
	}
	if !changed && !allTopics {
		return run(r)
	}
	var resp kmsg.Response
	var wait waitFunc
	if len(filtered.Groups) > 0 {
		resp, wait = run(&filtered)
	} else {
		resp = r.ResponseKind()
	}
	return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
		o, ok := resp.(*kmsg.OffsetFetchResponse)
		if !ok {
			return resp
		}
		for i := range o.Groups {
			kept := o.Groups[i].Topics[:0]
			for _, t := range o.Groups[i].Topics {
				if z.visible(opDescribe, resTopic, t.Topic) {
					kept = append(kept, t)
				}
			}
			o.Groups[i].Topics = kept
		}
		for _, e := range extras {
			if e.code != 0 {
				g := kmsg.NewOffsetFetchResponseGroup()
				g.Group, g.ErrorCode = e.group, e.code
				o.Groups = append(o.Groups, g)
				continue
			}
			for i := range o.Groups {
				if o.Groups[i].Group == e.group {
					o.Groups[i].Topics = append(o.Groups[i].Topics, e.topics...)
				}
			}
		}
		return resp
	})
}

// afterRun applies fix to a served answer, now or when its wait finishes.
func afterRun(resp kmsg.Response, wait waitFunc, fix func(kmsg.Response) kmsg.Response) (kmsg.Response, waitFunc) {
	if wait == nil {
		if resp == nil || resp == acks0Failed {
			return resp, nil
		}
		return fix(resp), nil
	}
	return nil, func(ctx context.Context) kmsg.Response {
		resp := wait(ctx)
		if resp == nil || resp == acks0Failed {
			return resp
		}
		return fix(resp)
	}
}

// denyAll answers a request with code in every error field, one entry per
// request entry (the same filling a follower uses to refuse requests).
func denyAll(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	mirror(reflect.ValueOf(req).Elem(), reflect.ValueOf(resp).Elem(), code)
	return resp
}

// splitRun serves the entries of a request's list field whose code is 0
// and answers the others with their code: each refused entry becomes its
// own one-entry request, answered by denyAll, and its answer entry is
// appended to the served answer's list.
func splitRun(req kmsg.Request, reqField, respField string, codes []int16, run func(kmsg.Request) (kmsg.Response, waitFunc)) (kmsg.Response, waitFunc) {
	denied := false
	for _, c := range codes {
		denied = denied || c != 0
	}
	if !denied {
		return run(req)
	}
	rv := reflect.ValueOf(req).Elem()
	list := rv.FieldByName(reqField)
	kept := reflect.MakeSlice(list.Type(), 0, list.Len())
	var refused []reflect.Value
	for i := 0; i < list.Len(); i++ {
		if codes[i] == 0 {
			kept = reflect.Append(kept, list.Index(i))
			continue
		}
		one := reflect.New(rv.Type())
		one.Elem().Set(rv)
		one.Elem().FieldByName(reqField).Set(reflect.Append(reflect.MakeSlice(list.Type(), 0, 1), list.Index(i)))
		resp := denyAll(one.Interface().(kmsg.Request), codes[i])
		if rl := reflect.ValueOf(resp).Elem().FieldByName(respField); rl.IsValid() && rl.Len() == 1 {
			refused = append(refused, rl.Index(0))
		}
	}
	allowed := reflect.New(rv.Type())
	allowed.Elem().Set(rv)
	allowed.Elem().FieldByName(reqField).Set(kept)
	resp, wait := run(allowed.Interface().(kmsg.Request))
	return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
		rl := reflect.ValueOf(resp).Elem().FieldByName(respField)
		if rl.IsValid() {
			rl.Set(reflect.Append(rl, refused...))
		}
		return resp
	})
}
