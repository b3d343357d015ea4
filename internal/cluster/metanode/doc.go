// Package metanode runs cluster mode's metadata log (docs/CLUSTER.md) on
// one broker: the Raft node of the metadata voters, the follower of the
// log on every other broker, and the applied copy of meta.State that
// every broker answers Metadata from.
//
// It owns:
//
//   - Node, a voter or an observer by whether its id is among
//     Config.Voters (3 or 5, static). Start runs its goroutines and Stop
//     ends them: on a voter one goroutine owns the raft.RawNode (etcd's
//     go.etcd.io/raft/v3, PreVote and CheckQuorum on) and the transport's
//     senders, on an observer one goroutine pulls the log; a third renews
//     the broker's lease. Each of those is the only writer of the applied
//     copy it keeps.
//   - The state machine: an entry is one meta.EncodeBatch batch, applied
//     with ApplyBatch. An entry that does not decode or whose batch Apply
//     refuses is skipped, on every broker alike; the proposer hears the
//     refusal.
//   - A voter's durable state, through raftgroup.DiskLog: HardState and
//     log in FileName, the compaction snapshot (meta.Snapshot at the
//     applied index) in SnapshotFileName, written atomically through vfs
//     before any message of the same Ready is sent. The log is folded
//     into a snapshot every CompactEvery applied entries; a voter too far
//     behind for entries gets the snapshot from the leader (Raft's
//     MsgSnap).
//   - Observers. A broker that is not a voter pulls committed entries
//     from a voter over HTTP (LogPath, a long poll), or the snapshot when
//     they are compacted away, and saves its copy (ObserverFileName) so
//     that it restarts with one. Not Raft learners: a learner must be in
//     the configuration every voter holds, so each broker joining or
//     leaving would be a configuration change through the log, and the
//     membership is static everywhere else; a pull needs the voters to
//     know nothing of the observers, any number of them. Committed
//     entries are the same on every voter, so any voter will do: the
//     observer moves to the leader when told of one, and away from a
//     voter that knows no leader (it may be cut off while the others go
//     on).
//   - The read-only view: Read (the state under a read lock), Snapshot (a
//     copy), Applied (the index, which only grows), Changed (a channel
//     closed at the next change), WaitApplied, Status. It keeps working
//     while the log has no leader: produce and fetch go on from it.
//   - Proposals: Propose on any node. The leader runs meta's command
//     check on its applied state at its own clock, proposes, and answers
//     once the entry applies. Any other node forwards the command to the
//     leader (ProposePath), chasing the leader a refusal names, and waits
//     for its own copy to apply the result. Without a leader a proposal
//     fails with ErrNoLeader when its context ends. The handlers are on
//     the replication port under HandlerPrefix, bearer-token checked as
//     raftgroup's.
//   - The broker's registration: RegisterBroker at Start with a fresh
//     incarnation id, renewed every LeaseInterval. The leader stamps the
//     expiry as its own now plus LeaseDuration and checks a new
//     incarnation against the running lease at that now, so every lease
//     in the log is on the leader's clock (Config.Now: the broker passes
//     clock.Clock.Now, tests a clock of their own). Stop asks for a lease
//     that ends at once.
//
// It may not touch the broker's logs, partitions, groups or client
// connections: it does not import the broker, and the broker acts on
// what Read and Changed show. It decides nothing about the metadata
// itself; meta's checks and Apply do, and this package only carries
// their records and answers. Moves, ACLs and the admin requests' Kafka
// shapes are the broker's (and later steps').
package metanode
