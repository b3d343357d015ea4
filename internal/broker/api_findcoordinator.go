package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// FindCoordinator names the group or transaction coordinator: the
// serving leader, on a follower too.
func init() {
	register(apiDef[*kmsg.FindCoordinatorRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, _ *conn, r *kmsg.FindCoordinatorRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleFindCoordinator(r), nil
		},
		authorize: func(z *authz, r *kmsg.FindCoordinatorRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			resp := z.findCoordinator(r, run)
			if resp == nil {
				return nil, nil, false
			}
			return resp, nil, true
		},
		onFollower: findCoordinatorOnFollower,
	})
}

// handleFindCoordinator names this broker: it coordinates every group
// and transaction.
func (b *Broker) handleFindCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	if b.cl != nil && (r.CoordinatorType == 0 || r.CoordinatorType == 1) {
		return b.cl.findCoordinator(r)
	}
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host, port := b.Advertised()
	answer := func(key string) (int16, *string) {
		if r.CoordinatorType != 0 && r.CoordinatorType != 1 {
			msg := "unknown coordinator type"
			return errInvalidRequest, &msg
		}
		if key == "" {
			return errInvalidGroupID, nil
		}
		return 0, nil
	}
	if r.Version >= 4 {
		for _, key := range r.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = key
			c.ErrorCode, c.ErrorMessage = answer(key)
			if c.ErrorCode == 0 {
				c.NodeID, c.Host, c.Port = b.nodeID, host, port
			}
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	resp.ErrorCode, resp.ErrorMessage = answer(r.CoordinatorKey)
	if resp.ErrorCode == 0 {
		resp.NodeID, resp.Host, resp.Port = b.nodeID, host, port
	}
	return resp
}

// findCoordinator refuses keys the principal may not describe; nil means
// every key is allowed.
func (z *authz) findCoordinator(r *kmsg.FindCoordinatorRequest, run runFunc) kmsg.Response {
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

// findCoordinatorOnFollower names the leader, which coordinates every
// group and transaction.
func findCoordinatorOnFollower(b *Broker, q *kmsg.FindCoordinatorRequest) kmsg.Response {
	if b.cl != nil {
		return b.cl.findCoordinator(q)
	}
	r := b.repl
	id := r.leaderID()
	host, port, ok := r.endpoint(id)
	return coordinatorAnswer(q, func(string) (int32, string, int32, bool) { return id, host, port, ok })
}

// coordinatorAnswer names, for every key asked about, the broker where
// says coordinates it, or COORDINATOR_NOT_AVAILABLE when where knows none.
func coordinatorAnswer(q *kmsg.FindCoordinatorRequest, where func(key string) (id int32, host string, port int32, ok bool)) kmsg.Response {
	resp := q.ResponseKind().(*kmsg.FindCoordinatorResponse)
	answer := func(key string) (code int16, id int32, host string, port int32) {
		id, host, port, ok := where(key)
		if id < 0 || !ok {
			return errCoordinatorNotAvailable, -1, "", -1
		}
		return 0, id, host, port
	}
	if q.Version >= 4 {
		for _, key := range q.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = key
			c.ErrorCode, c.NodeID, c.Host, c.Port = answer(key)
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = answer(q.CoordinatorKey)
	return resp
}
