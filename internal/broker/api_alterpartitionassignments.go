package broker

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/protocol"
)

var errInvalidReplicaAssignment = kerr.InvalidReplicaAssignment.Code

// AlterPartitionReassignments moves partitions between replication groups
// in cluster mode: a partition's new replicas must be brokers of one group,
// which becomes its owner once it has copied it (cluster_move.go); null
// replicas cancel a move still copying. A replication group's own
// membership is static, so outside cluster mode every reassignment is
// refused. Only the leader proposes, so a follower forwards it.
func init() {
	register(apiDef[*kmsg.AlterPartitionAssignmentsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.AlterPartitionAssignmentsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.handleAlterPartitionAssignments(ctx, r) }
		},
		authorize: func(z *authz, r *kmsg.AlterPartitionAssignmentsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
			resp.ErrorCode = errClusterAuthorizationFailed
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.AlterPartitionAssignmentsRequest],
		onFollower:  refuseWith[*kmsg.AlterPartitionAssignmentsRequest](errNotController),
	})
}

func (b *Broker) handleAlterPartitionAssignments(ctx context.Context, r *kmsg.AlterPartitionAssignmentsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	for _, rt := range r.Topics {
		out := kmsg.AlterPartitionAssignmentsResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			op := kmsg.AlterPartitionAssignmentsResponseTopicPartition{Partition: rp.Partition}
			var code int16
			var msg string
			switch {
			case b.cl == nil:
				code, msg = errInvalidReplicaAssignment, "a replication group's replicas are fixed by its configuration; moving partitions between groups needs cluster mode"
			case rp.Replicas == nil:
				code, msg = b.cl.cancelMove(ctx, rt.Topic, rp.Partition)
			default:
				group, err := b.cl.groupOfReplicas(b.cl.current(), rp.Replicas)
				if err != nil {
					code, msg = errInvalidReplicaAssignment, err.Error()
					break
				}
				code, msg = b.cl.startMove(ctx, rt.Topic, rp.Partition, group)
			}
			op.ErrorCode = code
			if msg != "" {
				op.ErrorMessage = &msg
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// ListPartitionReassignments lists the moves in progress: a moving
// partition's replicas are both groups' brokers, the target's adding and
// the source's removing.
func init() {
	register(apiDef[*kmsg.ListPartitionReassignmentsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.ListPartitionReassignmentsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleListPartitionReassignments(r), nil
		},
		authorize: func(z *authz, r *kmsg.ListPartitionReassignmentsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opDescribe, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
			resp.ErrorCode = errClusterAuthorizationFailed
			return resp, nil, true
		},
	})
}

func (b *Broker) handleListPartitionReassignments(r *kmsg.ListPartitionReassignmentsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	if b.cl == nil {
		return resp // no moves outside cluster mode
	}
	v := b.cl.current()
	asked := map[string][]int32{}
	for _, t := range r.Topics {
		asked[t.Topic] = t.Partitions
	}
	for _, name := range slices.Sorted(maps.Keys(v.topics)) {
		parts, ok := asked[name]
		if r.Topics != nil && !ok {
			continue
		}
		var out kmsg.ListPartitionReassignmentsResponseTopic
		for _, mp := range v.topics[name].Partitions {
			if mp.Move == meta.MoveNone || (r.Topics != nil && !slices.Contains(parts, mp.Partition)) {
				continue
			}
			from, to := v.members[mp.Source], v.members[mp.Target]
			out.Partitions = append(out.Partitions, kmsg.ListPartitionReassignmentsResponseTopicPartition{
				Partition:        mp.Partition,
				Replicas:         append(slices.Clone(to), from...),
				AddingReplicas:   slices.Clone(to),
				RemovingReplicas: slices.Clone(from),
			})
		}
		if len(out.Partitions) > 0 {
			out.Topic = name
			resp.Topics = append(resp.Topics, out)
		}
	}
	return resp
}
