package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup handles a SyncGroup request (v0-5). The leader's call stores
// the assignments and answers everyone; a follower's call blocks until the
// leader's arrives, the group starts another rebalance, or ctx ends. The
// response's MemberAssignment is never nil.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	w := c.startSync(req)
	select {
	case <-w.done:
		return w.resp
	case <-ctx.Done():
		c.cancelSync(w)
		<-w.done
		return w.resp
	}
}

func (c *Coordinator) startSync(req *kmsg.SyncGroupRequest) *syncWaiter {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.MemberAssignment = []byte{}
	w := &syncWaiter{resp: resp, done: make(chan struct{})}
	fail := func(code int16) *syncWaiter {
		resp.ErrorCode = code
		w.finish()
		return w
	}
	if req.Group == "" {
		return fail(errInvalidGroupID)
	}
	c.lock()
	defer c.unlock()
	now := c.clock.Now()
	g := c.groups[req.Group]
	if g == nil {
		return fail(errUnknownMemberID)
	}
	m, code := g.checkMember(req.MemberID, req.InstanceID, req.Generation)
	if code != errNone {
		return fail(code)
	}
	if req.Version >= 5 {
		if req.ProtocolType != nil && *req.ProtocolType != g.protocolType ||
			req.Protocol != nil && *req.Protocol != g.protocol {
			return fail(errInconsistentGroupProtocol)
		}
	}
	switch g.state {
	case StatePreparingRebalance:
		m.lastSeen = now
		return fail(errRebalanceInProgress)
	case StateStable:
		m.lastSeen = now
		m.synced = true
		g.fillSync(m, resp)
		w.finish()
		return w
	case StateCompletingRebalance:
		m.lastSeen = now
		m.synced = true
		if m.id != g.leader {
			if m.sync != nil {
				m.sync.resp.ErrorCode = errRebalanceInProgress
				m.sync.finish()
			}
			w.m = m
			m.sync = w
			return w
		}
		for _, o := range g.members {
			o.assignment = []byte{}
		}
		for _, a := range req.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil && a.MemberAssignment != nil {
				o.assignment = append([]byte{}, a.MemberAssignment...)
			}
		}
		g.state = StateStable
		for _, o := range g.members {
			if o.sync != nil {
				g.fillSync(o, o.sync.resp)
				o.sync.finish()
				o.sync = nil
			}
		}
		g.fillSync(m, resp)
		w.finish()
		c.log.Debug("group stable", "group", g.id, "generation", g.generation)
		return w
	default: // Empty: no members, so checkMember already failed
		return fail(errUnknownMemberID)
	}
}

func (c *Coordinator) cancelSync(w *syncWaiter) {
	c.lock()
	defer c.unlock()
	if m := w.m; m != nil && m.sync == w {
		m.sync = nil
		w.resp.ErrorCode = errRebalanceInProgress
		w.finish()
	}
}

func (g *group) fillSync(m *member, resp *kmsg.SyncGroupResponse) {
	resp.ErrorCode = errNone
	pt, pn := g.protocolType, g.protocol
	resp.ProtocolType, resp.Protocol = &pt, &pn
	resp.MemberAssignment = m.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
}

// checkMember validates a member id, optional instance id and generation
// against g, in Kafka's order: fenced, unknown, generation.
func (g *group) checkMember(memberID string, instanceID *string, generation int32) (*member, int16) {
	if instanceID != nil {
		if id, ok := g.statics[*instanceID]; ok && id != memberID {
			return nil, errFencedInstanceID
		}
	}
	m := g.members[memberID]
	if m == nil {
		return nil, errUnknownMemberID
	}
	if generation != g.generation {
		return nil, errIllegalGeneration
	}
	return m, errNone
}
