// Package group is MoonMQ's consumer-group coordinator, for both the
// classic protocol and the KIP-848 consumer protocol.
//
// It owns group membership and the rebalance protocols: JoinGroup (v0-9),
// SyncGroup (v0-5), Heartbeat (v0-4), LeaveGroup (v0-5), DescribeGroups
// (v0-6), ListGroups (v0-5) and DeleteGroups (v0-3) for classic groups, and
// ConsumerGroupHeartbeat (v0-1) and ConsumerGroupDescribe (v0-1) for
// consumer-protocol groups, whose partitions the coordinator assigns itself
// (server-side "uniform" and "range" assignors) from the topics the broker
// passes in. Both kinds share one namespace of group ids. Groups live only
// in memory; a broker restart forgets members, which then rejoin.
//
// It does not own committed offsets, which the broker keeps in
// __consumer_offsets. Instead it offers ValidateCommit, which decides whether
// an OffsetCommit (or TxnOffsetCommit) from a given member and generation may
// be applied, EnsureGroup, which registers a group known only through its
// offsets, ValidateFetch, which checks the member of an OffsetFetch v9+, and
// the WithOnEmpty/WithOnDelete hooks, which tell the broker when a group
// loses its last member or is deleted so it can drop the offsets. The
// package never touches the network, storage or offsets, and sees topics
// only through the Topics view passed to the consumer-protocol calls.
//
// Time is explicit: the owner calls Tick periodically (every ~100ms, or via
// Run) and the coordinator reads "now" from a Clock, so tests drive it with
// a fake clock and no sockets. JoinGroup and SyncGroup block the calling
// goroutine (never while holding the coordinator lock) until answered or the
// caller's context ends; every other call returns at once.
package group
