// Package meta holds cluster mode's metadata log (docs/CLUSTER.md) as a
// pure, deterministic state machine: the records, their JSON encoding, the
// state they build, and the checks the metadata leader runs before it
// proposes.
//
// It owns:
//
//   - The records, shaped like KRaft's: RegisterBrokerRecord,
//     TopicRecord, RemoveTopicRecord, PartitionRecord,
//     PartitionChangeRecord, ConfigRecord, ProducerIdsRecord, and
//     GroupStateRecord (each group's leader, term and ISR, published by
//     the group); and SecurityRecord, one key of the ACLs or the SCRAM
//     users and its value, which this package keeps (latest value per
//     key) but does not decode: internal/auth owns their format, the same
//     in a single group's compacted topics. Each travels in an envelope {"type": ..., "record":
//     {...}} (Encode, Decode); a log entry is a JSON array of envelopes
//     (EncodeBatch, DecodeBatch), applied all or nothing (ApplyBatch).
//   - State, the image of the applied log: Apply validates each record
//     against it and refuses one that does not fit (an *Error carrying
//     the Kafka error code), leaving it unchanged; the queries the broker
//     answers Metadata, DescribeConfigs and InitProducerId from; Snapshot
//     and Restore.
//   - The leader-epoch rule: a partition exposes epoch base + its owning
//     group's term (LeaderEpoch), and a cut-over to another group takes a
//     base that puts the epoch above anything the old owner exposed
//     (CutOverBase); Apply refuses a cut-over that would not.
//   - The commands the metadata leader checks a request with before
//     proposing (CreateTopic, CreatePartitions, DeleteTopic, SetConfig,
//     AllocateProducerIDs, RegisterBroker, and the move steps StartMove,
//     CutOver, FinishMove, CancelMove): each returns the records to
//     propose or the refusal to answer.
//   - PlanBalance: which partitions to move between groups so that their
//     counts differ by at most one (`moonmq cluster balance` and
//     Cluster.AutoBalance).
//
// It may not touch sockets, files, clocks, goroutines or randomness, and it
// imports nothing of the broker's: the current time (for broker leases) is
// an argument, and so are topic ids, which the caller draws. Apply reads no
// clock at all, so that every broker applying the same log reaches the same
// state; that is also why the lease check on a new incarnation lives in
// RegisterBroker (the leader's clock) and not in Apply. A State is not safe
// for concurrent use; the owner serializes calls.
//
// Left out for now: the epoch history a partition carries across a move (it lives
// with the partition's data, not in the metadata log); and the applied
// log index, which the Raft driver keeps beside the snapshot.
//
// Choices where the design leaves room:
//
//   - A group is known once a broker registered in it or a
//     GroupStateRecord named it, and is never forgotten. Partitions may
//     only be owned by, or moved to, a known group (else
//     INVALID_REPLICA_ASSIGNMENT). A group's term is 0 until it publishes.
//   - Ownership changes at the cut-over only. A PartitionChangeRecord
//     carries the partition's whole new state and must be the next step of
//     the move state machine from the current one; otherwise it is
//     refused, so a cancel that raced a cut-over does not apply. Moves
//     are numbered per partition (MoveSeq): a start takes the next
//     number and every later step must carry the current one, so a
//     cut-over fenced for a move that was since cancelled (and perhaps
//     started again) is refused too.
//   - The cut-over's base: the record carries FenceEpoch, the highest
//     epoch the old owner's leader exposed when it fenced (it may know of
//     a term the metadata log has not heard of yet). Apply accepts any base
//     whose epoch at the target's current term is above both FenceEpoch
//     and the epoch this state exposes; CutOverBase proposes exactly one
//     above, as the design says. A gap is harmless to KIP-320 clients, so
//     Apply does not insist on exactly one. The base may be negative (the
//     target's term already higher than the old epoch); the epoch never is.
//   - GroupStateRecord: the term never decreases, and one term has one
//     leader; an older or conflicting state (a deposed leader's late
//     publication) is refused with FENCED_LEADER_EPOCH.
//   - Leases: a broker is live while now < its lease expiry. Apply takes
//     the latest registration of a broker id as it comes (a restart, a
//     renewal, a shutdown's shortened lease), refusing only the same
//     incarnation in another group. Placement uses groups with a live
//     broker (none: BROKER_NOT_AVAILABLE); an explicit assignment may name
//     any known group.
//   - Placement is deterministic: fewest partitions first (ties to the
//     lowest group id), or round-robin from a start derived from the
//     topic's name. One command adds at most MaxPartitionsPerCommand
//     partitions (POLICY_VIOLATION beyond).
//   - Configs are stored as given (the broker validates keys and values);
//     a topic's configs go with the topic, and an empty value deletes, so
//     none can be set to "".
//   - Producer ids start at 0; each ProducerIdsRecord must advance the next
//     id by exactly one block.
//   - Decoding is strict (unknown fields and trailing data are errors):
//     a field one version ignores and another obeys would split states.
package meta
