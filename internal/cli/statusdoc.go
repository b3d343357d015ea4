package cli

import "time"

// StatusDoc is the JSON object of GET /replication/status. The CLI keeps its
// own copy of the shape instead of importing the broker's: the JSON is the
// contract, and `--json` prints whatever the broker sends, fields this struct
// does not know included.
type StatusDoc struct {
	// Role is "leader" on the replica serving clients, "follower" otherwise.
	Role string `json:"role"`
	// ReplicaID is the answering replica.
	ReplicaID int32 `json:"replicaId"`
	// Leader is the replica serving clients, -1 while none is known.
	Leader int32 `json:"leader"`
	// Epoch is the leader epoch.
	Epoch int32 `json:"epoch"`
	// ISR is the in-sync set.
	ISR []int32 `json:"isr"`
	// Followers is set on a leader: each follower's position, by replica id.
	Followers map[string]FollowerPosition `json:"followers,omitempty"`
	// Follower is set on a follower: its log-shipping state.
	Follower *FollowerState `json:"follower,omitempty"`
	// Raft is set in failover mode only.
	Raft *RaftStatus `json:"raft,omitempty"`
}

// FollowerPosition is what a leader knows of one follower.
type FollowerPosition struct {
	// LastFetch is when the follower last fetched; the zero time if never.
	LastFetch time.Time `json:"lastFetch"`
	// Partitions is the follower's durable log end by "topic-partition".
	Partitions map[string]int64 `json:"partitions"`
	// Lag is the records the follower lacks over all partitions, as the
	// leader computes it; nil from brokers that do not report it.
	Lag *int64 `json:"lag,omitempty"`
}

// FollowerState is a follower's log-shipping state.
type FollowerState struct {
	// State is the fetcher's state: idle, manifest, truncation, fetching.
	State string `json:"state"`
	// LeaderID and Leader are the leader followed (id, replication address).
	LeaderID int32  `json:"leaderId"`
	Leader   string `json:"leader"`
	// Epoch is the epoch followed.
	Epoch int32 `json:"epoch"`
	// LastError is the latest failure, "" after a success.
	LastError string `json:"lastError,omitempty"`
	// Unauthorized is set while the leader rejects this replica's token.
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Fenced is set while the follower waits for a newer leader.
	Fenced bool `json:"fenced,omitempty"`
	// Fetches, CorruptBatches and Resets are counters since start.
	Fetches        int64 `json:"fetches"`
	CorruptBatches int64 `json:"corruptBatches"`
	Resets         int64 `json:"resets"`
	// Unsyncable lists partitions whose log could not be fsynced.
	Unsyncable []string `json:"unsyncable,omitempty"`
}

// RaftStatus is a failover replica's Raft view.
type RaftStatus struct {
	// Role is the Raft role: leader, follower, candidate (or pre-candidate).
	Role string `json:"role"`
	// Leader is the replica whose leadership claim is the latest applied.
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
	// RaftTerm, CommitIndex and Applied are Raft's term and log indexes.
	RaftTerm    uint64 `json:"raft_term"`
	CommitIndex uint64 `json:"commit_index"`
	Applied     uint64 `json:"applied_index"`
	// Err is set when Raft storage failed and the node stopped.
	Err string `json:"error,omitempty"`
}

// Stats is the part of the metrics port's /stats document the CLI prints.
type Stats struct {
	NodeID          int32            `json:"node_id"`
	ClusterID       string           `json:"cluster_id"`
	Role            string           `json:"role"`
	Connections     int64            `json:"connections"`
	Requests        int64            `json:"requests"`
	BadFrames       int64            `json:"bad_frames"`
	ProducedBytes   int64            `json:"produced_bytes"`
	ProducedRecords int64            `json:"produced_records"`
	FetchedBytes    int64            `json:"fetched_bytes"`
	Fsyncs          int64            `json:"fsyncs"`
	FsyncAvgMicros  int64            `json:"fsync_avg_us"`
	Expired         ExpiredStats     `json:"expired"`
	Topics          int              `json:"topics"`
	Partitions      []PartitionStats `json:"partitions"`
	// Replication is the replication status object, where the broker puts
	// it into /stats (issue 4 asks for it; absent on a single node).
	Replication *StatusDoc `json:"replication,omitempty"`
}

// ExpiredStats is what offsets retention and producer and
// transactional-id expiry removed since the broker started.
type ExpiredStats struct {
	Offsets          int64 `json:"offsets"`
	Groups           int64 `json:"groups"`
	Producers        int64 `json:"producers"`
	TransactionalIDs int64 `json:"transactional_ids"`
}

// PartitionStats is one partition in /stats.
type PartitionStats struct {
	Topic          string `json:"topic"`
	Partition      int32  `json:"partition"`
	LogStartOffset int64  `json:"log_start_offset"`
	LogEndOffset   int64  `json:"log_end_offset"`
	HighWatermark  int64  `json:"high_watermark"`
	SizeBytes      int64  `json:"size_bytes"`
}

// LogRange is a leader partition's log start and end.
type LogRange struct {
	Start, End int64
}

// LogRanges indexes s's partitions by "topic-partition", the key the status
// object uses for follower positions.
func (s Stats) LogRanges() map[string]LogRange {
	out := make(map[string]LogRange, len(s.Partitions))
	for _, p := range s.Partitions {
		out[partKey(p.Topic, p.Partition)] = LogRange{Start: p.LogStartOffset, End: p.LogEndOffset}
	}
	return out
}
