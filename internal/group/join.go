package group

import (
	"bytes"
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

// JoinGroup handles a JoinGroup request (v0-9) from a client identified by
// clientID and clientHost (used for member ids and DescribeGroups). It
// blocks until the rebalance the join takes part in completes or ctx ends;
// a join whose ctx ends first does not count as having rejoined.
func (c *Coordinator) JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest, clientID, clientHost string) *kmsg.JoinGroupResponse {
	w := c.startJoin(req, clientID, clientHost)
	select {
	case <-w.done:
		return w.resp
	case <-ctx.Done():
		c.cancelJoin(w)
		<-w.done
		return w.resp
	}
}

// startJoin processes req and returns its waiter, finished if the answer is
// already known.
func (c *Coordinator) startJoin(req *kmsg.JoinGroupRequest, clientID, clientHost string) *joinWaiter {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	w := &joinWaiter{resp: resp, done: make(chan struct{})}
	fail := func(code int16) *joinWaiter {
		resp.ErrorCode = code
		w.finish()
		return w
	}
	if req.Group == "" {
		return fail(errInvalidGroupID)
	}
	session := millis(req.SessionTimeoutMillis)
	if session < c.minSession || session > c.maxSession {
		return fail(errInvalidSessionTimeout)
	}
	rebalance := millis(req.RebalanceTimeoutMillis)
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return fail(errInconsistentGroupProtocol)
	}
	var instance *string
	if req.Version >= 5 && req.InstanceID != nil {
		instance = req.InstanceID
	}

	c.lock()
	defer c.unlock()
	now := c.clock.Now()
	g := c.groups[req.Group]
	if g == nil && req.MemberID != "" {
		return fail(errUnknownMemberID)
	}
	if g == nil {
		var code int16
		if g, code = c.getOrCreate(req.Group); code != errNone {
			return fail(code)
		}
	}
	full := c.maxMembers > 0 && len(g.members)+len(g.pendingIDs) >= c.maxMembers

	// Resolve who is joining before changing anything.
	var (
		m        *member // existing member, if any
		newID    string  // id for a new member or a static replacement
		replaced bool
	)
	if instance != nil {
		oldID, known := g.statics[*instance]
		switch {
		case req.MemberID == "" && known:
			m, newID, replaced = g.members[oldID], c.newID(clientID), true
		case req.MemberID == "":
			if full {
				return fail(errGroupMaxSizeReached)
			}
			newID = c.newID(clientID)
		case known && oldID == req.MemberID:
			m = g.members[oldID]
		case known:
			return fail(errFencedInstanceID)
		default:
			return fail(errUnknownMemberID)
		}
	} else {
		_, isPending := g.pendingIDs[req.MemberID]
		switch {
		case req.MemberID == "":
			if full {
				return fail(errGroupMaxSizeReached)
			}
			newID = c.newID(clientID)
		case isPending:
			newID = req.MemberID
		case g.members[req.MemberID] != nil:
			m = g.members[req.MemberID]
			if m.instanceID != nil {
				// A static member must keep presenting its instance id.
				return fail(errFencedInstanceID)
			}
		default:
			return fail(errUnknownMemberID)
		}
	}
	selfID := newID
	if m != nil {
		selfID = m.id
	}
	if !c.compatible(g, selfID, req) {
		return fail(errInconsistentGroupProtocol)
	}
	if instance == nil && req.MemberID == "" && req.Version >= 4 {
		// KIP-394: hand out an id; the member must rejoin with it.
		g.pendingIDs[newID] = now.Add(session)
		resp.MemberID = newID
		return fail(errMemberIDRequired)
	}
	delete(g.pendingIDs, newID)

	changed := true
	switch {
	case m == nil:
		m = &member{id: newID, fresh: true}
		if instance != nil {
			s := *instance
			m.instanceID = &s
			g.statics[s] = newID
		}
		g.members[newID] = m
		g.order = append(g.order, newID)
	case replaced:
		c.log.Info("static member replaced", "group", g.id, "instance", *instance, "old", m.id, "new", newID)
		c.answerFenced(m)
		oldID := m.id
		delete(g.members, oldID)
		m.id = newID
		g.members[newID] = m
		for i, id := range g.order {
			if id == oldID {
				g.order[i] = newID
			}
		}
		g.statics[*instance] = newID
		if g.leader == oldID {
			g.leader = newID
		}
		changed = !sameProtocols(m, req)
	default:
		changed = !sameProtocols(m, req)
		if m.join != nil {
			// A newer join supersedes one still waiting.
			m.join.resp.ErrorCode = errRebalanceInProgress
			m.join.resp.MemberID = m.id
			m.join.finish()
			m.join = nil
		}
		if m.sync != nil {
			m.sync.resp.ErrorCode = errRebalanceInProgress
			m.sync.finish()
			m.sync = nil
		}
	}
	m.clientID, m.clientHost = clientID, clientHost
	m.sessionTimeout, m.rebalanceTimeout = session, rebalance
	m.protocolType = req.ProtocolType
	m.protocols = copyProtocols(req.Protocols)
	m.lastSeen = now

	switch g.state {
	case StateEmpty:
		g.protocolType = req.ProtocolType
		c.prepareRebalance(g, now, "member joined empty group")
	case StateStable:
		if !m.fresh && !changed && (replaced || m.id != g.leader) {
			// Nothing to rebalance: hand back the current generation.
			c.fillJoin(g, m, resp, false)
			w.finish()
			return w
		}
		c.prepareRebalance(g, now, "member joined")
	case StateCompletingRebalance:
		if !m.fresh && !changed && !replaced {
			// Probably lost the JoinGroup answer: repeat it.
			c.fillJoin(g, m, resp, m.id == g.leader)
			w.finish()
			return w
		}
		c.prepareRebalance(g, now, "member joined")
	case StatePreparingRebalance:
		if m.fresh && !g.initialUntil.IsZero() {
			g.initialUntil = minTime(now.Add(c.initialDelay), g.initialCap)
		}
		if d := now.Add(m.rebalanceTimeout); g.rebalanceDeadline.Before(d) {
			g.rebalanceDeadline = d
		}
	}
	w.g, w.m = g, m
	m.join = w
	c.maybeComplete(g, now)
	return w
}

// cancelJoin withdraws a join whose caller gave up. A member that was not
// yet part of a generation is forgotten; an existing one merely has not
// rejoined.
func (c *Coordinator) cancelJoin(w *joinWaiter) {
	c.lock()
	defer c.unlock()
	m, g := w.m, w.g
	if m == nil || m.join != w {
		return // already answered
	}
	m.join = nil
	w.resp.ErrorCode = errRebalanceInProgress
	w.resp.MemberID = m.id
	w.finish()
	now := c.clock.Now()
	if m.fresh && g.members[m.id] == m {
		c.removeMember(g, m, errUnknownMemberID)
		if len(g.members) == 0 {
			c.maybeComplete(g, now)
		}
	}
}

func (c *Coordinator) answerFenced(m *member) {
	if m.join != nil {
		m.join.resp.ErrorCode = errFencedInstanceID
		m.join.resp.MemberID = m.id
		m.join.finish()
		m.join = nil
	}
	if m.sync != nil {
		m.sync.resp.ErrorCode = errFencedInstanceID
		m.sync.finish()
		m.sync = nil
	}
}

// compatible reports whether req can join g alongside the members other
// than self: same protocol type and a protocol every one of them supports.
func (c *Coordinator) compatible(g *group, self string, req *kmsg.JoinGroupRequest) bool {
	others := 0
	for id, o := range g.members {
		if id == self {
			continue
		}
		others++
		if o.protocolType != req.ProtocolType {
			return false
		}
	}
	if others == 0 {
		return true
	}
	for _, p := range req.Protocols {
		ok := true
		for id, o := range g.members {
			if id != self && !supports(o.protocols, p.Name) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func sameProtocols(m *member, req *kmsg.JoinGroupRequest) bool {
	if m.protocolType != req.ProtocolType || len(m.protocols) != len(req.Protocols) {
		return false
	}
	for i, p := range req.Protocols {
		if m.protocols[i].Name != p.Name || !bytes.Equal(m.protocols[i].Metadata, p.Metadata) {
			return false
		}
	}
	return true
}

func copyProtocols(ps []kmsg.JoinGroupRequestProtocol) []kmsg.JoinGroupRequestProtocol {
	out := make([]kmsg.JoinGroupRequestProtocol, len(ps))
	for i, p := range ps {
		out[i] = kmsg.JoinGroupRequestProtocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)}
	}
	return out
}
