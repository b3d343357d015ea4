package replication

// FetchState is where a follower's fetcher is in its loop.
type FetchState int

const (
	// StateIdle: no leader known; waiting for NewLeader.
	StateIdle FetchState = iota
	// StateManifest: reading and applying the leader's manifest.
	StateManifest
	// StateTruncation: reconciling every partition with the leader's
	// epoch history (once per epoch).
	StateTruncation
	// StateFetching: the fetch loop.
	StateFetching
)

// String names the state.
func (s FetchState) String() string {
	switch s {
	case StateIdle:
		return "idle"
	case StateManifest:
		return "manifest"
	case StateTruncation:
		return "truncation"
	case StateFetching:
		return "fetching"
	}
	return "unknown"
}

// ActionKind is what the fetcher's owner does next.
type ActionKind int

const (
	// ActWait: nothing to do until the next input (no leader is known, or
	// the input was stale and ignored).
	ActWait ActionKind = iota
	// ActFetchManifest: fetch the leader's manifest (topics, incarnation
	// ids, abort index) and apply it, then report ManifestApplied.
	ActFetchManifest
	// ActTruncate: run the truncation protocol (StartTruncation,
	// DecideTruncation) for every partition against Leader at Epoch, then
	// report TruncationDone.
	ActTruncate
	// ActFetch: send a fetch with every partition's log end; report
	// FetchResult, or an error.
	ActFetch
	// ActResetPartition: discard Partition and restart it empty at Offset
	// (the leader's log start), then fetch (report FetchResult as usual).
	ActResetPartition
)

// String names the action kind.
func (k ActionKind) String() string {
	switch k {
	case ActWait:
		return "wait"
	case ActFetchManifest:
		return "fetch-manifest"
	case ActTruncate:
		return "truncate"
	case ActFetch:
		return "fetch"
	case ActResetPartition:
		return "reset-partition"
	}
	return "unknown"
}

// Action is the fetcher's decision.
type Action struct {
	// Kind is what to do.
	Kind ActionKind
	// Leader and Epoch identify the leader to talk to.
	Leader int32
	// Epoch is the leader epoch every request carries.
	Epoch int32
	// Partition is the partition to reset (ActResetPartition).
	Partition TopicPartition
	// Offset is the reset offset (ActResetPartition).
	Offset int64
	// Backoff asks the owner to wait a retry interval before acting: the
	// previous attempt failed.
	Backoff bool
}

// FetchError is an error a fetch (or a manifest or truncation request)
// can end with.
type FetchError int

const (
	// ErrTransient: a timeout or connection failure; retry the step.
	ErrTransient FetchError = iota + 1
	// ErrNotLeader: the replica asked is not the leader (code 20).
	ErrNotLeader
	// ErrFencedLeaderEpoch: the leader's epoch is newer than ours.
	ErrFencedLeaderEpoch
	// ErrUnknownLeaderEpoch: our epoch is newer than the leader's (it has
	// not learned of its own election yet); retry after a backoff.
	ErrUnknownLeaderEpoch
)

// Fetcher is a follower's replication loop as a state machine:
// on a new leader it reads the manifest, then once per epoch truncates,
// then fetches in a loop; a manifest digest change sends it back to the
// manifest. Inputs carry the epoch they were started under and stale ones
// are ignored, so a late answer from a previous leader cannot move it.
type Fetcher struct {
	state          FetchState
	leader         int32
	epoch          int32
	hasLeader      bool
	digest         string
	truncatedEpoch int32
}

// NewFetcher returns an idle fetcher.
func NewFetcher() *Fetcher {
	return &Fetcher{leader: -1, epoch: -1, truncatedEpoch: -1}
}

// State returns the current state.
func (f *Fetcher) State() FetchState { return f.state }

// Leader returns the leader followed and its epoch (-1, -1 if none).
func (f *Fetcher) Leader() (id int32, epoch int32) { return f.leader, f.epoch }

func (f *Fetcher) act(k ActionKind) Action {
	return Action{Kind: k, Leader: f.leader, Epoch: f.epoch}
}

// current returns the action of the current state, for retries.
func (f *Fetcher) current() Action {
	switch f.state {
	case StateManifest:
		return f.act(ActFetchManifest)
	case StateTruncation:
		return f.act(ActTruncate)
	case StateFetching:
		return f.act(ActFetch)
	}
	return f.act(ActWait)
}

// NewLeader starts following leader at epoch (learnt from the group's Raft
// log). An older epoch is ignored, and so is the leader already followed
// unless the fetcher is idle (it stopped on ErrNotLeader or LeaderLost);
// otherwise the loop restarts at the manifest. Truncation still runs only
// once per epoch.
func (f *Fetcher) NewLeader(leader, epoch int32) Action {
	if f.hasLeader && (epoch < f.epoch || epoch == f.epoch && leader == f.leader && f.state != StateIdle) {
		return f.current()
	}
	f.hasLeader = true
	f.leader, f.epoch = leader, epoch
	f.state = StateManifest
	return f.act(ActFetchManifest)
}

// LeaderLost stops fetching until the next NewLeader (this replica became
// leader, or the group has no leader).
func (f *Fetcher) LeaderLost() Action {
	f.state = StateIdle
	return f.act(ActWait)
}

// ManifestApplied reports that the manifest read under epoch, whose
// digest is digest, has been applied. The fetcher then truncates if it has
// not yet done so in this epoch, else fetches.
func (f *Fetcher) ManifestApplied(epoch int32, digest string) Action {
	if f.state != StateManifest || epoch != f.epoch {
		return f.current()
	}
	f.digest = digest
	if f.truncatedEpoch != f.epoch {
		f.state = StateTruncation
		return f.act(ActTruncate)
	}
	f.state = StateFetching
	return f.act(ActFetch)
}

// TruncationDone reports that every partition was reconciled with the
// leader of epoch.
func (f *Fetcher) TruncationDone(epoch int32) Action {
	if f.state != StateTruncation || epoch != f.epoch {
		return f.current()
	}
	f.truncatedEpoch = epoch
	f.state = StateFetching
	return f.act(ActFetch)
}

// FetchResult reports a successful fetch under epoch whose answer carried
// the leader's manifest digest. A changed digest sends the fetcher back to
// the manifest; otherwise it fetches again (the leader long-polls).
func (f *Fetcher) FetchResult(epoch int32, digest string) Action {
	if f.state != StateFetching || epoch != f.epoch {
		return f.current()
	}
	if digest != f.digest {
		f.state = StateManifest
		return f.act(ActFetchManifest)
	}
	return f.act(ActFetch)
}

// OffsetOutOfRange reports that the leader of epoch refused a fetch of tp
// at the follower's log end followerEnd: below the leader's log start the
// partition is reset to it (the records in between are gone from the
// leader, so nothing can fill the gap); above the leader's log end the
// follower holds a tail it should not have, so the truncation step runs
// again.
func (f *Fetcher) OffsetOutOfRange(epoch int32, tp TopicPartition, followerEnd, leaderStart, leaderEnd int64) Action {
	if f.state != StateFetching || epoch != f.epoch {
		return f.current()
	}
	switch {
	case followerEnd < leaderStart:
		a := f.act(ActResetPartition)
		a.Partition, a.Offset = tp, leaderStart
		return a
	case followerEnd > leaderEnd:
		f.state = StateTruncation
		f.truncatedEpoch = -1
		return f.act(ActTruncate)
	}
	// In range after all (the leader moved on): fetch again.
	return f.act(ActFetch)
}

// Failed reports that the current step under epoch failed with err.
// Transient errors, ErrUnknownLeaderEpoch and ErrNotLeader retry the step
// after a backoff: the replica named by the group's latest claim answers
// NOT_LEADER until its broker has promoted itself, a moment after Raft
// applied the claim everywhere, and a replica that is no longer the leader
// is replaced by NewLeader when the group elects another.
// ErrFencedLeaderEpoch means a newer epoch exists, so the fetcher waits
// for NewLeader.
func (f *Fetcher) Failed(epoch int32, err FetchError) Action {
	if epoch != f.epoch || f.state == StateIdle {
		return f.current()
	}
	switch err {
	case ErrFencedLeaderEpoch:
		f.state = StateIdle
		return f.act(ActWait)
	}
	a := f.current()
	a.Backoff = true
	return a
}
