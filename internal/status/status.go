// Package status holds the wire types of the broker's status and stats
// documents, shared by the broker that writes them and the CLI and test
// harness that read them; it imports nothing of the project.
//
// Two documents: Stats is the metrics port's GET /stats, Replication the
// replication port's GET /replication/status (also embedded in /stats on
// a replica). The JSON tags are the wire format: readers that do not use
// these types (the bench tools, end-to-end tests, the status page) decode
// the documents by those names.
package status

import "time"

// Stats is the /stats JSON document.
type Stats struct {
	NodeID          int32  `json:"node_id"`
	ClusterID       string `json:"cluster_id"`
	Role            string `json:"role"`
	Connections     int64  `json:"connections"`
	Requests        int64  `json:"requests"`
	BadFrames       int64  `json:"bad_frames"`
	ProducedBytes   int64  `json:"produced_bytes"`
	ProducedRecords int64  `json:"produced_records"`
	FetchedBytes    int64  `json:"fetched_bytes"`
	Fsyncs          int64  `json:"fsyncs"`
	FsyncAvgMicros  int64  `json:"fsync_avg_us"`
	// Expired counts what retention and expiry removed since start.
	Expired Expired `json:"expired"`
	// WallClockSkewMs is how far the wall clock is ahead of broker time,
	// the clock retention and expiry use (negative: behind); it changes
	// when the wall clock is stepped.
	WallClockSkewMs int64 `json:"wall_clock_skew_ms"`
	// Memory is what client connections make the broker hold.
	Memory     Memory      `json:"memory"`
	Topics     int         `json:"topics"`
	Partitions []Partition `json:"partitions"`
	// SegmentFiles are the partitions' open segment files.
	SegmentFiles SegmentFiles `json:"segment_files"`
	// Disk is the data directory's disk: free space, full, stalled.
	Disk Disk `json:"disk"`
	// Replication is the replication status document (replicas only;
	// absent on a single node).
	Replication *Replication `json:"replication,omitempty"`
}

// Memory is the client-request memory: request bytes being read or
// handled against their bound, connections paused for it, fetch answers
// in flight and the shared frame buffers kept for reuse.
type Memory struct {
	QueuedRequestBytes    int64 `json:"queued_request_bytes"`
	QueuedMaxRequestBytes int64 `json:"queued_max_request_bytes"`
	ReadersWaiting        int64 `json:"readers_waiting"`
	RequestMemoryWaits    int64 `json:"request_memory_waits"`
	FetchAnswerBytes      int64 `json:"fetch_answer_bytes"`
	FramePoolIdleBytes    int64 `json:"frame_pool_idle_bytes"`
	// FramePoolHits and FramePoolMisses count frame buffers lent from the
	// pool and allocated (mapped) afresh: a miss rate that stays high
	// under steady load means the pool keeps too little.
	FramePoolHits   int64 `json:"frame_pool_hits"`
	FramePoolMisses int64 `json:"frame_pool_misses"`
}

// Expired counts what offsets retention and producer and
// transactional-id expiry removed since the broker started.
type Expired struct {
	Offsets          int64 `json:"offsets"`
	Groups           int64 `json:"groups"`
	Producers        int64 `json:"producers"`
	TransactionalIDs int64 `json:"transactional_ids"`
}

// SegmentFiles counts the segment log files the broker holds open: one per
// partition's active segment, plus rolled segments' files, of which at most
// Limit are open at once (Server.MaxOpenSegmentFiles).
//
// Tails and TailBytes are the active segments whose small appends wait in
// memory for one write with their neighbours (the next sync writes them),
// and the bytes they hold: at most 512 segments of 64 KiB each.
type SegmentFiles struct {
	Open      int64 `json:"open"`
	Limit     int   `json:"limit"`
	Opens     int64 `json:"opens"`
	Evictions int64 `json:"evictions"`
	Tails     int64 `json:"tails"`
	TailBytes int64 `json:"tail_bytes"`
}

// Disk is the health of the data directory's disk. While Full, appends
// are refused with KAFKA_STORAGE_ERROR and reads are served; Stalled means
// an fsync ran longer than Server.FsyncStallMs.
type Disk struct {
	Full           bool  `json:"full"`
	Stalled        bool  `json:"stalled"`
	FreeBytes      int64 `json:"free_bytes"`
	TotalBytes     int64 `json:"total_bytes"`
	ReserveBytes   int64 `json:"reserve_bytes"`
	RefusedAppends int64 `json:"refused_appends"`
	SlowestFsyncMs int64 `json:"slowest_fsync_ms"`
	FullEvents     int64 `json:"full_events"`
	StallEvents    int64 `json:"stall_events"`
}

// Partition is one partition's entry in /stats.
type Partition struct {
	Topic          string `json:"topic"`
	Partition      int32  `json:"partition"`
	LogStartOffset int64  `json:"log_start_offset"`
	LogEndOffset   int64  `json:"log_end_offset"`
	HighWatermark  int64  `json:"high_watermark"`
	SizeBytes      int64  `json:"size_bytes"`
	// Owner is set in cluster mode only: who serves the partition.
	Owner *PartitionOwner `json:"owner,omitempty"`
}

// PartitionOwner is, in cluster mode, the replication group that owns a
// partition and that group's leader, leader epoch and in-sync brokers,
// as this broker knows them (its own group's from the group itself, the
// others' from the metadata log).
type PartitionOwner struct {
	Group string `json:"group"`
	// Leader is the owner group's leader, -1 while it has none.
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	ISR         []int32 `json:"isr"`
	// Local is true when this broker's group is the owner: its copy is
	// the one clients are served from.
	Local bool `json:"local"`
	// Move is the partition's move in progress ("copying" or
	// "cut-over", empty for none), from Source to Target.
	Move   string `json:"move,omitempty"`
	Source string `json:"move_source,omitempty"`
	Target string `json:"move_target,omitempty"`
	// Fenced is true when this broker's group's Raft log fences its
	// copy for a move: it appends nothing to it.
	Fenced bool `json:"fenced,omitempty"`
	// ServingEpoch is the leader epoch this broker stamps on what it
	// appends to the partition while it serves it (its group's term
	// plus the partition's epoch base); 0 on a broker that does not.
	ServingEpoch int32 `json:"serving_epoch,omitempty"`
}

// Replication is the body of GET /replication/status.
type Replication struct {
	// Role is "leader" on the replica serving clients, "follower" otherwise.
	Role string `json:"role"`
	// ReplicaID is the answering replica.
	ReplicaID int32 `json:"replicaId"`
	// Leader is the replica it takes for the leader, -1 while none is
	// known.
	Leader int32 `json:"leader"`
	// Epoch is the leader epoch.
	Epoch int32 `json:"epoch"`
	// ISR is the in-sync set.
	ISR []int32 `json:"isr"`
	// Followers is set on a leader: each follower's position, by replica
	// id.
	Followers map[string]FollowerPosition `json:"followers,omitempty"`
	// Follower is set on a follower: its log-shipping state.
	Follower *Follower `json:"follower,omitempty"`
	// Raft is the failover group's Raft view (failover mode only).
	Raft *Raft `json:"raft,omitempty"`
	// Metadata is the broker's view of the cluster's metadata log
	// (cluster mode only).
	Metadata *MetadataLog `json:"metadata,omitempty"`
}

// MetadataLog is a broker's view of the cluster's metadata log.
type MetadataLog struct {
	// Voter says whether the broker is one of the log's voters; Role is
	// leader, follower or candidate on a voter, observer else.
	Voter bool   `json:"voter"`
	Role  string `json:"role"`
	// Leader is the metadata leader the broker knows of, -1 if none.
	Leader int32 `json:"leader"`
	// Term and Commit are Raft's, on a voter.
	Term   uint64 `json:"term,omitempty"`
	Commit uint64 `json:"commit,omitempty"`
	// Applied is the log index the broker's copy has applied.
	Applied uint64 `json:"applied"`
	// Error is set when the broker's metadata node stopped on a storage
	// error; the broker must be restarted once the disk is fixed.
	Error string `json:"error,omitempty"`
}

// FollowerPosition is what a leader knows of one follower.
type FollowerPosition struct {
	// LastFetch is when the follower last fetched; the zero time if never.
	LastFetch time.Time `json:"lastFetch"`
	// Partitions is the follower's durable log end by "topic-partition".
	Partitions map[string]int64 `json:"partitions"`
	// Lag is how many records the follower lacks, summed over the
	// leader's partitions (a partition it has not fetched counts from the
	// log start). The broker always sets it; it is a pointer so that a
	// reader can tell a document from an older broker, which has none.
	Lag *int64 `json:"lag"`
}

// Follower is a follower's log-shipping state.
type Follower struct {
	// State is the fetcher's state: idle, manifest, truncation, fetching.
	State string `json:"state"`
	// LeaderID, Leader and Epoch identify the leader followed (id,
	// replication address, epoch).
	LeaderID int32  `json:"leaderId"`
	Leader   string `json:"leader"`
	Epoch    int32  `json:"epoch"`
	// LastError is the latest failure, "" after a success.
	LastError string `json:"lastError,omitempty"`
	// Unauthorized is set while the leader rejects this replica's token.
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Fenced is set while the follower waits for a newer leader.
	Fenced bool `json:"fenced,omitempty"`
	// Fetches counts successful fetches.
	Fetches int64 `json:"fetches"`
	// CorruptBatches counts fetched batches rejected by validation.
	CorruptBatches int64 `json:"corruptBatches"`
	// Unsyncable lists the partitions ("topic-partition") whose log could
	// not be fsynced.
	Unsyncable []string `json:"unsyncable,omitempty"`
	// Resets counts partitions discarded and restarted at the leader's
	// log start.
	Resets int64 `json:"resets"`
	// Paused names why the follower fetches positions only (a full
	// disk); empty while it fetches records.
	Paused string `json:"paused,omitempty"`
}

// Raft is a failover replica's Raft view.
type Raft struct {
	// ReplicaID is the answering replica.
	ReplicaID int32 `json:"replica_id"`
	// Role is the Raft role: leader, follower, candidate (or
	// pre-candidate).
	Role string `json:"role"`
	// Leader is the replica whose leadership claim is the latest applied,
	// -1 if none.
	Leader int32 `json:"leader"`
	// RaftLeader is the Raft leader this replica knows of, -1 if none.
	RaftLeader int32 `json:"raft_leader"`
	// Epoch is the epoch of the latest applied claim.
	Epoch int32 `json:"epoch"`
	// ISR and HasISR are the applied in-sync set and whether there is one.
	ISR    []int32 `json:"isr"`
	HasISR bool    `json:"has_isr"`
	// Serving is true on the serving leader only.
	Serving bool `json:"serving"`
	// HandingOff is set on a Raft leader outside the ISR that is passing
	// leadership on.
	HandingOff bool `json:"handing_off,omitempty"`
	// Heard lists the other members this replica has received a Raft
	// message from at its current term.
	Heard []int32 `json:"heard,omitempty"`
	// RaftTerm, CommitIndex and Applied are Raft's term and log indexes.
	RaftTerm    uint64 `json:"raft_term"`
	CommitIndex uint64 `json:"commit_index"`
	Applied     uint64 `json:"applied_index"`
	// Unclean is set while this replica may not stand for election
	// because it restarted uncleanly and has not caught up since.
	Unclean bool `json:"unclean_restart,omitempty"`
	// LogDamaged is set while Unclean is because this replica's log lost
	// durable data.
	LogDamaged bool `json:"log_damaged,omitempty"`
	// Err is set when Raft storage failed and the node stopped.
	Err string `json:"error,omitempty"`
}
