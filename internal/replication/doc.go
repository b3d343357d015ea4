// Package replication holds the decisions of MoonMQ's replication and
// failover (docs/REPLICATION.md) as pure, deterministic state machines.
//
// It owns:
//
//   - Leader: the leader side of one replication group across all of its
//     partitions. It tracks every follower's durable position from its
//     fetches, computes each partition's high watermark, the set acks=all
//     waits for (AckSet), and decides which ISR changes to propose to Raft
//     (shrink a lagging follower, one silent since the epoch began
//     (WithSilentRemoval) or one that lost committed records; expand a
//     caught-up one; KIP-497 and KIP-966 rules), with a minimum ISR per
//     partition (SetMinISR: the topic's min.insync.replicas).
//   - The follower's log-truncation decision (KIP-101, KIP-279):
//     StartTruncation and DecideTruncation, including the "no epoch
//     history, discard and recopy" and "below the leader's log start,
//     reset" rules.
//   - Fetcher: the follower's loop (manifest, truncation once per epoch,
//     fetch) as a state machine that says what to do next.
//   - Eligibility: who may stand for election (Eligible, Candidacy) and
//     when an elected leader must hand leadership off (MustHandOff), and
//     AcceptISRChange, the rule the Raft-log applier uses for ISR entries.
//
// It may not touch sockets, files, clocks or goroutines, and it does not
// import the storage or broker packages: every input, including the current
// time, is passed in explicitly, and every output is a value the caller
// acts on. The same code is therefore driven by real I/O (Raft, log
// shipping over HTTP) and by a deterministic simulator (seeded scheduler,
// virtual clock, lossy network, crash-prone disk). None of the types is safe
// for concurrent use; the owner serializes calls.
//
// Positions are log offsets: a replica's durable end is one past the last
// offset it has fsynced, and a follower's fetch offset is its durable log
// end. Offsets below a partition's high watermark are on every member of
// the committed ISR.
package replication

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	// Topic is the topic name.
	Topic string
	// Partition is the partition index.
	Partition int32
}

// EpochEntry is one line of a partition's leader-epoch history: the first
// offset written under Epoch. It mirrors storage.EpochEntry without
// importing the storage package.
type EpochEntry struct {
	// Epoch is the leader epoch.
	Epoch int32
	// StartOffset is the first offset written under Epoch.
	StartOffset int64
}
