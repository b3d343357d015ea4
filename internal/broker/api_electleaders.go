package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ElectLeaders (KIP-183, KIP-460) hands leadership to each named
// partition's preferred replica, the first Metadata lists: in cluster
// mode the member of the owning group that spreads the groups' leaders
// over machines (meta.PreferredLeaders), in a single replication group
// its lowest replica id. A group's partitions share the group's leader,
// so electing one moves them all; the transfer is Raft's (etcd raft's
// TransferLeader), a planned failover to an in-sync member. MoonMQ never
// elects a replica outside the ISR: an unclean election is answered as
// Kafka answers it for a partition that has a leader (ELECTION_NOT_NEEDED)
// and, for one without, with ELIGIBLE_LEADERS_NOT_AVAILABLE. A follower
// forwards the request to its group's leader.
func init() {
	register(apiDef[*kmsg.ElectLeadersRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 2},
		serve: func(b *Broker, _ *conn, r *kmsg.ElectLeadersRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.handleElectLeaders(ctx, r) }
		},
		authorize: func(z *authz, r *kmsg.ElectLeadersRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
			resp.ErrorCode = errClusterAuthorizationFailed
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.ElectLeadersRequest],
		onFollower:  refuseWith[*kmsg.ElectLeadersRequest](errNotController),
	})
}

var (
	errElectionNotNeeded          = kerr.ElectionNotNeeded.Code
	errPreferredLeaderUnavailable = kerr.PreferredLeaderNotAvailable.Code
	errEligibleLeadersUnavailable = kerr.EligibleLeadersNotAvailable.Code
)

// election is one group's leadership as ElectLeaders sees it.
type election struct {
	group             string // "" outside cluster mode
	leader, preferred int32
	eligible          bool // the preferred replica is live and in the ISR
}

// electWait bounds how long ElectLeaders waits for a transfer to show.
const electWait = 15 * time.Second

func (b *Broker) handleElectLeaders(ctx context.Context, r *kmsg.ElectLeadersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
	unclean := r.Version >= 1 && r.ElectionType != 0
	asked := r.Topics
	if asked == nil { // every partition
		for _, t := range b.sortedTopics() {
			if secretTopic(t.name) {
				continue
			}
			rt := kmsg.ElectLeadersRequestTopic{Topic: t.name}
			for i := range t.partitions {
				rt.Partitions = append(rt.Partitions, int32(i))
			}
			asked = append(asked, rt)
		}
	}
	// One transfer per group, whatever number of its partitions asked.
	results := map[string]int16{}
	for _, rt := range asked {
		out := kmsg.ElectLeadersResponseTopic{Topic: rt.Topic}
		for _, p := range rt.Partitions {
			op := kmsg.ElectLeadersResponseTopicPartition{Partition: p}
			e, code := b.electionOf(rt.Topic, p)
			switch {
			case unclean && code == errLeaderNotAvailable:
				code = errEligibleLeadersUnavailable
			case unclean && code == 0:
				code = errElectionNotNeeded
			case code == 0:
				var done bool
				if code, done = results[e.group]; !done {
					code = b.elect(ctx, e, time.Duration(r.TimeoutMillis)*time.Millisecond)
					results[e.group] = code
				}
			}
			op.ErrorCode = code
			if msg := electMessage(code); msg != "" {
				op.ErrorMessage = &msg
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// electionOf finds the group leading a partition and its preferred
// replica, or the code that answers the partition.
func (b *Broker) electionOf(topic string, index int32) (election, int16) {
	if c := b.cl; c != nil {
		v := c.current()
		p, ok := v.partition(topic, index)
		if !ok {
			return election{}, errUnknownTopicOrPartition
		}
		g, ok := c.groupState(v, p.Owner)
		pref, known := v.preferred[p.Owner]
		if !ok || !known || g.Leader < 0 {
			return election{}, errLeaderNotAvailable
		}
		br, registered := v.brokers[pref]
		return election{group: p.Owner, leader: g.Leader, preferred: pref,
			eligible: registered && br.Live(c.leaseNowMs()) && slices.Contains(g.ISR, pref)}, 0
	}
	t := b.lookup(topic)
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return election{}, errUnknownTopicOrPartition
	}
	r := b.repl
	if r == nil {
		return election{}, errElectionNotNeeded // a single node leads itself
	}
	pref := r.ids[0] // sorted: Metadata lists the lowest id first
	isr := r.counted(t.partitions[index])
	return election{leader: r.leaderID(), preferred: pref, eligible: r.failover && slices.Contains(isr, pref)}, 0
}

// elect hands e's group leadership to its preferred replica and waits
// until the group is led from there.
func (b *Broker) elect(ctx context.Context, e election, timeout time.Duration) int16 {
	switch {
	case e.leader == e.preferred:
		return errElectionNotNeeded
	case !e.eligible:
		return errPreferredLeaderUnavailable
	}
	if timeout <= 0 || timeout > electWait {
		timeout = electWait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	if c := b.cl; c != nil {
		err = c.transferLeadership(ctx, e.leader, e.preferred)
	} else {
		err = b.repl.node.TransferLeadership(ctx, e.preferred)
	}
	if err != nil {
		b.log.Warn("ElectLeaders: handing the group's leadership to its preferred replica failed", "group", e.group, "from", e.leader, "to", e.preferred, "err", err)
		if errors.Is(err, context.DeadlineExceeded) {
			return errRequestTimedOut
		}
		return errPreferredLeaderUnavailable
	}
	b.log.Info("ElectLeaders: handing the group's leadership to its preferred replica", "group", e.group, "from", e.leader, "to", e.preferred)
	for {
		if b.ledFrom(e) {
			return 0
		}
		select {
		case <-ctx.Done():
			return errRequestTimedOut
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ledFrom reports whether e's group is now led by its preferred replica,
// as this broker sees it.
func (b *Broker) ledFrom(e election) bool {
	if c := b.cl; c != nil {
		g, ok := c.groupState(c.current(), e.group)
		return ok && g.Leader == e.preferred
	}
	return b.repl.leaderID() == e.preferred
}

// electMessage says what an ElectLeaders code means here.
func electMessage(code int16) string {
	switch code {
	case errPreferredLeaderUnavailable:
		return "the preferred replica (the first in Metadata) is not live and in the ISR, or the group's leadership is fixed by configuration (static replication)"
	case errRequestTimedOut:
		return "the leadership transfer did not finish in time; the group keeps its leader or finishes the transfer later"
	case errEligibleLeadersUnavailable:
		return "the group has no leader now; MoonMQ elects only in-sync replicas (Raft), so it waits for one rather than elect another"
	}
	return ""
}
