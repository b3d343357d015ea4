// Package shipping owns MoonMQ's log shipping: the pull-based
// transfer of partition logs from a leader to its followers over HTTP.
//
// Leader side: Handler serves three endpoints under /replication/ on the
// replication port, backed by a Source the broker implements:
//
//   - GET  /replication/manifest: the topic list (name, incarnation id,
//     partition count, configs) and the metadata digest, as JSON;
//   - POST /replication/epoch-end: KIP-279 answers ("where does the largest
//     epoch <= E end, and where does the log start") for a list of
//     partitions, as JSON;
//   - POST /replication/fetch: the follower reports its durable log end per
//     partition (acknowledging everything below it, fed to
//     Source.OnFollowerFetch) and receives the stored batches from there up to
//     the leader's log end, byte for byte as storage returned them, with the
//     leader's high watermark and log start, in a compact binary frame. The
//     request is a binary frame too (Content-Type application/octet-stream;
//     the leader also takes it as JSON, which followers of older builds
//     send and a follower falls back to when a leader refuses the frame).
//     The leader long-polls, with one waiter over all the request's
//     partitions, when there is nothing new.
//
// Every request carries the bearer token (when one is configured; 401
// otherwise) and the leader epoch the follower believes in; the leader answers
// 409 with FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or NOT_LEADER when that
// differs from its own (KIP-320).
//
// Follower side: Follower runs replication.Fetcher's loop (manifest,
// truncation once per epoch with replication.StartTruncation and
// DecideTruncation, fetch) in a goroutine it owns, applying the manifest
// through a Sink the broker implements. Every fetched batch is validated with
// recordbatch.Check and bounded (offset and epoch) before AppendReplica; a
// corrupt response is never appended, only refetched. The log is fsynced
// before its end is reported, so the offset a follower reports is always its
// durable end.
//
// A follower restarted at the leader's log start (OFFSET_OUT_OF_RANGE or a
// truncation reset) restarts its empty log at the base offset of the batch
// holding that start, so batches are always stored whole, as Kafka does.
// A follower whose fetch offset falls into a gap that compaction left on
// the leader (wholly removed batches) copies the gap: before the first
// batch after a gap in a response it calls AllowGaps with the leader's log
// end, so that its own recovery accepts the gaps, and appends the batch at
// its offset. A gap is checked against the batch after it (no CRC covers
// a base offset).
//
// The package may not touch the broker, protocol, config or raftgroup
// packages, Raft state, the ISR or high-watermark decisions (those belong to
// replication.Leader, fed by the broker through Source.OnFollowerFetch),
// or files other than through the logs it is handed. Not yet shipped: the
// transaction abort index in the manifest.
package shipping
