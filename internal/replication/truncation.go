package replication

// TruncAction says what a follower does next while reconciling one
// partition with a new leader.
type TruncAction int

const (
	// TruncAsk: ask the leader where epoch Epoch ends
	// (OffsetForLeaderEpoch), after truncating to Offset if Truncate is set.
	TruncAsk TruncAction = iota + 1
	// TruncDone: truncate to Offset (remove every offset >= Offset; a no-op
	// at or past the log end) and start fetching at Offset.
	TruncDone
	// TruncReset: discard the whole partition and restart it empty at
	// Offset (the leader's log start), then fetch from there. Used when the
	// follower's data is below the leader's retention, when the leader
	// knows none of the follower's epochs, and when the follower has
	// records but no epoch history (nothing tells which of them the
	// leader has, so they are discarded and recopied).
	TruncReset
)

// String names the action.
func (a TruncAction) String() string {
	switch a {
	case TruncAsk:
		return "ask"
	case TruncDone:
		return "done"
	case TruncReset:
		return "reset"
	}
	return "unknown"
}

// TruncDecision is one step of the truncation protocol.
type TruncDecision struct {
	// Action is what to do.
	Action TruncAction
	// Epoch is the epoch to ask about (TruncAsk).
	Epoch int32
	// Offset is the truncation offset (TruncDone, and TruncAsk when
	// Truncate), or the new log start (TruncReset).
	Offset int64
	// Truncate is set on a TruncAsk that first truncates to Offset.
	Truncate bool
}

// LeaderEpochAnswer is the leader's answer to "where does epoch E end"
// (KIP-279 semantics, storage.Log.EndOffsetForEpoch): the largest epoch the
// leader knows that is <= E, and where it ends (the next epoch's start, or
// the leader's log end for its latest epoch). Epoch -1 means the leader
// knows no epoch <= E. LogStart is the leader's log start offset.
type LeaderEpochAnswer struct {
	// Epoch is the largest leader epoch <= the one asked, or -1.
	Epoch int32
	// EndOffset is where Epoch ends on the leader, or -1.
	EndOffset int64
	// LogStart is the leader's log start offset.
	LogStart int64
}

// FollowerLog is what the truncation protocol needs to know about the
// follower's copy of a partition.
type FollowerLog struct {
	// History is the follower's epoch history, oldest first.
	History []EpochEntry
	// LogStart is the follower's log start offset.
	LogStart int64
	// LogEnd is the follower's log end offset.
	LogEnd int64
}

// StartTruncation is the first step for a partition when the follower
// starts following a new epoch (KIP-101): an empty log has
// nothing to reconcile (fetch from its end; the leader answers
// OFFSET_OUT_OF_RANGE if that is below its log start); records without
// epoch history are discarded and recopied from the leader's log start
// (learnt from the leader, so the reset offset is left to DecideTruncation:
// the step is an ask for epoch -1); otherwise ask where the follower's
// latest epoch ends.
func StartTruncation(f FollowerLog) TruncDecision {
	if f.LogEnd <= f.LogStart && len(f.History) == 0 {
		return TruncDecision{Action: TruncDone, Offset: f.LogEnd}
	}
	if len(f.History) == 0 {
		// Untrusted data: ask for nothing the leader can match, which
		// DecideTruncation turns into a reset to the leader's log start.
		return TruncDecision{Action: TruncAsk, Epoch: -1}
	}
	return TruncDecision{Action: TruncAsk, Epoch: f.History[len(f.History)-1].Epoch}
}

// DecideTruncation takes the leader's answer about the follower's latest
// epoch (the Epoch of the TruncAsk that StartTruncation or the previous
// step returned; after a truncating TruncAsk, f must reflect the
// truncation) and returns the next step (KIP-279):
//
//   - the leader knows no epoch <= the asked one, or the follower has no
//     epoch history: reset to the leader's log start;
//   - the follower has the leader's epoch E': truncate to the smaller of
//     the two ends of E' (and of the follower's log end); done;
//   - the follower lacks E' (the leader answered with an older epoch than
//     asked): everything the follower wrote after its largest epoch f < E'
//     is from epochs the leader never had, so truncate to where f ends and
//     ask again about f. Epochs strictly decrease, so this converges;
//   - the follower has no epoch <= E': truncate to the smaller of the end of E'
//     and the follower's first epoch start; done.
//
// When the final offset is below the leader's log start the partition is
// reset to the leader's log start instead. An answer with an epoch newer
// than asked breaks the protocol; it also resets, which is safe (the leader
// holds every acknowledged record) if costly.
func DecideTruncation(f FollowerLog, asked int32, ans LeaderEpochAnswer) TruncDecision {
	reset := TruncDecision{Action: TruncReset, Offset: ans.LogStart}
	if len(f.History) == 0 || ans.Epoch < 0 || ans.EndOffset < 0 || ans.Epoch > asked {
		return reset
	}
	done := func(off int64) TruncDecision {
		off = min(off, f.LogEnd)
		if off < ans.LogStart {
			return reset
		}
		return TruncDecision{Action: TruncDone, Offset: off}
	}
	fe, fend := endOffsetForEpoch(f.History, f.LogEnd, ans.Epoch)
	switch {
	case fe == ans.Epoch:
		return done(min(fend, ans.EndOffset))
	case fe < 0:
		return done(min(f.History[0].StartOffset, ans.EndOffset))
	default:
		if fend < ans.LogStart {
			return reset
		}
		return TruncDecision{Action: TruncAsk, Epoch: fe, Offset: min(fend, f.LogEnd), Truncate: true}
	}
}

// EndOffsetForEpoch answers "where does epoch end" from an epoch history
// and log end with KIP-279 semantics: the largest epoch <= epoch and its
// end (the next entry's start, or logEnd for the latest); -1, -1 if every
// entry is newer. It is the leader's side of the protocol, for simulators;
// storage.Log.EndOffsetForEpoch is the real one.
func EndOffsetForEpoch(history []EpochEntry, logEnd int64, epoch int32) (int32, int64) {
	return endOffsetForEpoch(history, logEnd, epoch)
}

func endOffsetForEpoch(h []EpochEntry, logEnd int64, epoch int32) (int32, int64) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Epoch <= epoch {
			if i == len(h)-1 {
				return h[i].Epoch, logEnd
			}
			return h[i].Epoch, h[i+1].StartOffset
		}
	}
	return -1, -1
}

// TruncateHistory returns the epoch history after truncating the log to
// offset: entries starting at or after offset are dropped (as
// storage.Log.Truncate does).
func TruncateHistory(h []EpochEntry, offset int64) []EpochEntry {
	n := len(h)
	for n > 0 && h[n-1].StartOffset >= offset {
		n--
	}
	return append([]EpochEntry(nil), h[:n]...)
}
