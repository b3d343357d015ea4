package group

import (
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat handles a Heartbeat request (v0-4). It answers
// REBALANCE_IN_PROGRESS while the group waits for members to rejoin.
func (c *Coordinator) Heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = c.heartbeat(req)
	return resp
}

func (c *Coordinator) heartbeat(req *kmsg.HeartbeatRequest) int16 {
	if req.Group == "" {
		return errInvalidGroupID
	}
	c.lock()
	defer c.unlock()
	g := c.groups[req.Group]
	if g == nil {
		return errUnknownMemberID
	}
	m, code := g.checkMember(req.MemberID, req.InstanceID, req.Generation)
	if code != errNone {
		return code
	}
	m.lastSeen = c.clock.Now()
	if g.state == StatePreparingRebalance {
		return errRebalanceInProgress
	}
	return errNone
}

// LeaveGroup handles a LeaveGroup request (v0-5): v0-2 name one member id,
// v3+ a batch of member or instance ids answered one by one. Remaining
// members rebalance.
func (c *Coordinator) LeaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if req.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return resp
	}
	items := req.Members
	if req.Version < 3 {
		items = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	c.lock()
	defer c.unlock()
	g := c.groups[req.Group]
	removed := false
	for _, it := range items {
		code := c.leaveOne(g, it, &removed)
		if req.Version < 3 {
			resp.ErrorCode = code
			continue
		}
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = it.MemberID, it.InstanceID, code
		resp.Members = append(resp.Members, rm)
	}
	if removed {
		c.membersChanged(g, c.clock.Now())
	}
	return resp
}

func (c *Coordinator) leaveOne(g *group, it kmsg.LeaveGroupRequestMember, removed *bool) int16 {
	if g == nil {
		return errUnknownMemberID
	}
	id := it.MemberID
	if it.InstanceID != nil {
		sid, ok := g.statics[*it.InstanceID]
		if !ok {
			return errUnknownMemberID
		}
		if id != "" && id != sid {
			return errFencedInstanceID
		}
		id = sid
	} else if _, ok := g.pendingIDs[id]; ok {
		delete(g.pendingIDs, id)
		return errNone
	}
	m := g.members[id]
	if m == nil {
		return errUnknownMemberID
	}
	c.log.Info("group member left", "group", g.id, "member", id)
	c.removeMember(g, m, errUnknownMemberID)
	*removed = true
	return errNone
}

// DescribeGroups handles a DescribeGroups request (v0-6). Unknown groups
// are reported as Dead with no error, as Kafka does. Member metadata and
// assignments are filled only for Stable groups. A consumer-protocol group
// is reported as Kafka 4.x does: Dead, and from v6 (which has an error
// message) GROUP_ID_NOT_FOUND "Group X is not a classic group."; clients
// describe it with ConsumerGroupDescribe.
func (c *Coordinator) DescribeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	c.lock()
	defer c.unlock()
	for _, id := range req.Groups {
		d := kmsg.NewDescribeGroupsResponseGroup()
		d.Group = id
		d.State = StateDead
		if c.cgroups[id] != nil && req.Version >= 6 {
			msg := "Group " + id + " is not a classic group."
			d.ErrorCode, d.ErrorMessage = errGroupIDNotFound, &msg
		}
		if g := c.groups[id]; g != nil {
			d.State = g.state
			d.ProtocolType = g.protocolType
			stable := g.state == StateStable
			if stable {
				d.Protocol = g.protocol
			}
			for _, mid := range g.order {
				m := g.members[mid]
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.InstanceID = m.id, m.instanceID
				dm.ClientID, dm.ClientHost = m.clientID, m.clientHost
				dm.ProtocolMetadata, dm.MemberAssignment = []byte{}, []byte{}
				if stable {
					for _, p := range m.protocols {
						if p.Name == g.protocol && p.Metadata != nil {
							dm.ProtocolMetadata = p.Metadata
						}
					}
					if m.assignment != nil {
						dm.MemberAssignment = m.assignment
					}
				}
				d.Members = append(d.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

// ListGroups handles a ListGroups request (v0-5), honouring the v4+
// StatesFilter and v5+ TypesFilter (case-insensitive; "classic" or
// "consumer" for KIP-848 groups, whose protocol type is "consumer" too).
// Groups are sorted by id.
func (c *Coordinator) ListGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	match := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if strings.EqualFold(f, v) {
				return true
			}
		}
		return false
	}
	states, types := req.StatesFilter, req.TypesFilter
	if req.Version < 4 {
		states = nil
	}
	if req.Version < 5 {
		types = nil
	}
	c.lock()
	defer c.unlock()
	add := func(id, protocolType, state, typ string) {
		if match(types, typ) && match(states, state) {
			lg := kmsg.NewListGroupsResponseGroup()
			lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, protocolType, state, typ
			resp.Groups = append(resp.Groups, lg)
		}
	}
	for _, g := range c.groups {
		add(g.id, g.protocolType, g.state, groupType)
	}
	for _, g := range c.cgroups {
		add(g.id, consumerGroupType, g.state(), consumerGroupType)
	}
	slices.SortFunc(resp.Groups, func(a, b kmsg.ListGroupsResponseGroup) int { return strings.Compare(a.Group, b.Group) })
	return resp
}

// Delete deletes groups (of either protocol) that are Empty, returning per
// group 0, NON_EMPTY_GROUP (68), GROUP_ID_NOT_FOUND (69) or INVALID_GROUP_ID
// (24).
// The WithOnDelete hook runs for each deleted group after the lock is
// released, so the broker can drop the group's offsets there. Groups known
// only to the broker's offset store should be registered with EnsureGroup
// first.
func (c *Coordinator) Delete(groups []string) map[string]int16 {
	out := make(map[string]int16, len(groups))
	c.lock()
	defer c.unlock()
	for _, id := range groups {
		out[id] = c.deleteOne(id)
	}
	return out
}

// DeleteEmpty deletes each of the given groups that is still empty
// since the same time (as EmptyGroups reported it, so it has had no
// member, and no member id handed out, in between), and returns the ids
// it deleted, sorted. The broker's offsets retention uses it to drop
// empty groups without offsets without racing a join.
func (c *Coordinator) DeleteEmpty(groups map[string]time.Time) []string {
	c.lock()
	defer c.unlock()
	var out []string
	for id, since := range groups {
		if cg := c.cgroups[id]; cg != nil {
			if len(cg.members) > 0 || !cg.emptySince.Equal(since) {
				continue
			}
		} else if g := c.groups[id]; g == nil || g.state != StateEmpty || len(g.members) > 0 ||
			len(g.pendingIDs) > 0 || !g.emptySince.Equal(since) {
			continue
		}
		if c.deleteOne(id) == errNone {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (c *Coordinator) deleteOne(id string) int16 {
	if id == "" {
		return errInvalidGroupID
	}
	if cg := c.cgroups[id]; cg != nil {
		if len(cg.members) > 0 {
			return errNonEmptyGroup
		}
		delete(c.cgroups, id)
		c.deleted(id)
		return errNone
	}
	g := c.groups[id]
	switch {
	case g == nil:
		return errGroupIDNotFound
	case g.state != StateEmpty && g.state != StateDead:
		return errNonEmptyGroup
	}
	delete(c.groups, id)
	g.state = StateDead
	c.deleted(id)
	return errNone
}

func (c *Coordinator) deleted(id string) {
	if c.onDelete != nil {
		f := c.onDelete
		c.pending = append(c.pending, func() { f(id) })
	}
	c.log.Info("group deleted", "group", id)
}

// DeleteGroups handles a DeleteGroups request (v0-3) through Delete.
func (c *Coordinator) DeleteGroups(req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	codes := c.Delete(req.Groups)
	for _, id := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group, dg.ErrorCode = id, codes[id]
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// ValidateCommit decides whether an OffsetCommit (or TxnOffsetCommit) from
// memberID at generation may be applied to group, returning a Kafka error
// code (0 = commit). A negative generation is a "simple" commit from a
// non-member, accepted only when the group is Empty or unknown (an unknown
// group is then created Empty, as Kafka does, or GROUP_MAX_SIZE_REACHED if
// WithMaxGroups forbids that). Otherwise, in Kafka's order:
// FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while CompletingRebalance,
// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION. Commits at the current generation
// are accepted while PreparingRebalance so members can commit before
// rejoining. A successful member commit counts as a heartbeat. For a
// consumer-protocol group, generation is the member epoch; see
// validateConsumerCommit for its rules.
func (c *Coordinator) ValidateCommit(group, memberID string, generation int32, instanceID *string) int16 {
	return c.validateCommit(group, memberID, generation, instanceID, -1)
}

// ValidateOffsetCommit is ValidateCommit for an OffsetCommit request of the
// given version: as in Kafka, a member of a consumer-protocol group must
// commit with version 9 or above (UNSUPPORTED_VERSION otherwise), the
// first that carries its member epoch in place of a generation.
func (c *Coordinator) ValidateOffsetCommit(group, memberID string, generation int32, instanceID *string, version int16) int16 {
	return c.validateCommit(group, memberID, generation, instanceID, version)
}

// validateCommit serves both; version is -1 for a TxnOffsetCommit.
func (c *Coordinator) validateCommit(group, memberID string, generation int32, instanceID *string, version int16) int16 {
	if group == "" {
		return errInvalidGroupID
	}
	c.lock()
	defer c.unlock()
	if cg := c.cgroups[group]; cg != nil {
		return c.validateConsumerCommit(cg, memberID, generation, version)
	}
	g := c.groups[group]
	if g == nil {
		if generation >= 0 {
			return errIllegalGeneration
		}
		_, code := c.getOrCreate(group)
		return code
	}
	if instanceID != nil {
		if id, ok := g.statics[*instanceID]; ok && id != memberID {
			return errFencedInstanceID
		}
	}
	if generation < 0 && g.state == StateEmpty {
		return errNone
	}
	if g.state == StateCompletingRebalance {
		return errRebalanceInProgress
	}
	m := g.members[memberID]
	if m == nil {
		return errUnknownMemberID
	}
	if generation != g.generation {
		return errIllegalGeneration
	}
	m.lastSeen = c.clock.Now()
	return errNone
}
