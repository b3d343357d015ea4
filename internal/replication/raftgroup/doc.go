// Package raftgroup runs the Raft group of a MoonMQ replication group in
// failover mode: the replicas elect a leader with Raft (etcd's
// go.etcd.io/raft/v3, PreVote and CheckQuorum on, static membership of 3
// or 5 replicas) and replicate a tiny state machine through its log:
// leadership claims (the Raft term of the leader that commits one becomes
// the leader epoch) and ISR changes stamped with the epoch that proposed
// them.
//
// It owns:
//
//   - Node: one goroutine owns the raft.RawNode (Start/Stop); everything
//     else talks to it through channels. A Raft leader proposes a
//     LeadershipClaim for its term and is the serving leader only once that
//     claim is applied; a leader that is not eligible (outside the ISR of its
//     own Raft log) never claims and transfers Raft leadership to an
//     eligible member instead.
//   - Persistence of the Raft HardState, log and compaction snapshot in
//     <DataDir>/replication-raft.json, written atomically through vfs before
//     any message of the same Ready is sent.
//   - The replicated state machine (GroupState) and its versioned entry
//     encoding.
//   - The transport: the Transport interface, an HTTP sender with bounded
//     per-peer queues that drops when full, and Handler, the
//     /replication/raft/* endpoint the broker mounts on its replication port
//     (bearer-token checked).
//
// It may not touch the broker's logs, client connections or the fetcher:
// the decisions about who is in sync, high watermarks and truncation live
// in the parent package replication (whose Eligible, MustHandOff and
// AcceptISRChange rules this package applies), and the broker acts on the
// GroupState and serving flag this package publishes. It does not import
// the broker or storage packages.
package raftgroup
