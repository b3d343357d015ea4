package partition

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
)

// errTransactionCoordinatorFenced refuses a zombie coordinator's marker.
var errTransactionCoordinatorFenced = kerr.TransactionCoordinatorFenced.Code

// Refusal is an append refused under the append lock, with the Kafka error
// code the producer gets.
type Refusal struct {
	Code int16
	// Transaction is set when the caller's transaction check refused
	// (otherwise the producer state did).
	Transaction bool
}

func (r *Refusal) Error() string { return fmt.Sprintf("append refused with error %d", r.Code) }

// Appended is what an append wrote.
type Appended struct {
	// Base and Last are the first and last offsets of the batches.
	Base, Last int64
	// Duplicate is set when the batch was a retry of one already held:
	// nothing was appended and Base and Last are the original's.
	Duplicate bool
}

// Flush says when an append of the broker's own is synced.
type Flush int8

const (
	// FlushNow starts a group-commit pass at once: somebody waits for it.
	FlushNow Flush = iota
	// FlushLazily leaves the write to the next pass another write starts,
	// or the flusher's idle tick: nobody waits for it and recovery
	// repairs its loss.
	FlushLazily
	// FlushWithRequest leaves the pass to the caller, who appends to
	// other partitions for the same request and then starts one pass for
	// all of them (Flusher.Kick). A pass started by the first partition's
	// append would sync that partition alone, and the request would wait
	// for a second pass for the rest.
	FlushWithRequest
)

// writer is who appends, which decides the fence check, the offsets and
// epoch the batches get, and how they are scheduled for the group commit.
type writer int8

const (
	byClient  writer = iota // a produce: offsets and epoch assigned here
	byBroker                // the broker's own write: as a produce
	byReplica               // shipped from the leader: its offsets and epochs
	byCopy                  // copied from another group's leader: its offsets and epochs
)

// write is the single append path. Under the append lock it refuses a
// deleted partition, lets admit refuse or answer the batches from the
// partition's state, asks the fence whether this replica may write,
// appends every batch, brings the producer and transaction state up to
// date, and schedules the group commit. stateErr is a producer-state
// update that failed after its batch was appended (the batch stays).
func (p *Partition) write(w writer, batches [][]byte, headers []recordbatch.Header, flush Flush,
	admit func() (*Appended, error)) (res Appended, stateErr, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deleted.Load() {
		return res, nil, ErrDeleted
	}
	if admit != nil {
		if dup, err := admit(); err != nil || dup != nil {
			if dup != nil {
				res = *dup
			}
			return res, nil, err
		}
	}
	var epoch int32
	switch w {
	case byReplica:
		err = p.fence.Following()
	case byCopy:
		err = p.fence.Copying()
	default:
		epoch, err = p.fence.Leading()
	}
	if err != nil {
		return res, nil, err
	}
	appended := false
	defer func() {
		// Whatever reached the log is synced, also when a later batch
		// of the same request failed.
		if appended && w != byReplica { // a copy is synced as the leader's own
			p.flush.markDirty(p, flush == FlushNow)
		}
	}()
	now := p.clock.Now().UnixMilli()
	for i, batch := range batches {
		base := headers[i].BaseOffset
		if w == byReplica || w == byCopy {
			err = p.log.AppendReplica(batch)
		} else {
			base, err = p.log.Append(batch, epoch)
		}
		if err != nil {
			return res, stateErr, err
		}
		appended = true
		if i == 0 {
			res.Base = base
		}
		h := headers[i]
		h.BaseOffset = base
		res.Last = h.LastOffset()
		if err := p.apply(h, batch, now); err != nil && stateErr == nil {
			stateErr = err
		}
	}
	return res, stateErr, nil
}

// LeaderEpochStart is the start of the epoch this replica leads in, at the
// log's end, for a produce over many partitions that each begin the epoch
// (the first after a failover), whose starts are persisted all at once
// ahead of the appends (storage.Volume.StartEpochs); false when this
// replica does not lead (the append refuses) or the log's history has the
// epoch already.
func (p *Partition) LeaderEpochStart() (storage.EpochStart, bool) {
	epoch, err := p.fence.Leading()
	if err != nil || epoch <= p.log.LatestEpoch() {
		return storage.EpochStart{}, false
	}
	return storage.EpochStart{Log: p.log, Epoch: epoch, At: p.log.EndOffset()}, true
}

// AppendClient appends a produce's batches, which the caller has validated
// (headers are theirs, parsed). Under the append lock, before anything is
// written, txnCheck (nil: none) may refuse a transactional first batch
// with a Kafka error code, and an idempotent producer's batch is checked
// against its sequence: out of order or fenced is refused, a retry of a
// batch already held is answered with its original offsets. Errors:
// *Refusal, ErrDeleted, the fence's, or the log's. flush is FlushNow, or
// FlushWithRequest when the caller starts the pass itself.
func (p *Partition) AppendClient(batches [][]byte, headers []recordbatch.Header, txnCheck func(recordbatch.Header) int16, flush Flush) (Appended, error) {
	h := headers[0]
	admit := func() (*Appended, error) {
		if h.Transactional() && txnCheck != nil {
			// Checked under the append lock: the coordinator installs
			// a Prepare* (or fencing) state before it appends a marker
			// here, so a batch either lands before the marker or is
			// refused; it can never slip in after it and reopen the
			// transaction.
			if code := txnCheck(h); code != 0 {
				return nil, &Refusal{Code: code, Transaction: true}
			}
		}
		if h.ProducerID < 0 {
			return nil, nil
		}
		v := p.producers.Check(batchInfo(h, 0)) // Check reads no time
		switch {
		case v.Code != 0:
			return nil, &Refusal{Code: v.Code}
		case v.Duplicate:
			// A retry of a batch we already hold: answer with its
			// original offset (after it is durable, like the original).
			return &Appended{Base: v.BaseOffset, Last: v.BaseOffset + int64(h.LastOffsetDelta), Duplicate: true}, nil
		}
		return nil, nil
	}
	res, stateErr, err := p.write(byClient, batches, headers, flush, admit)
	if stateErr != nil {
		p.logger.Error("producer state update failed", "err", stateErr)
	}
	return res, err
}

// AppendOwn appends a batch the broker wrote itself (internal-topic
// records, transaction markers) and returns the offset after it: what
// WaitCommitted must reach. It returns the fence's error when this replica
// may not append, and a *Refusal with TRANSACTION_COORDINATOR_FENCED for a
// marker whose coordinator epoch is below that of the producer's last
// marker here (a zombie coordinator's). A marker is otherwise treated
// as AppendMarker treats one that is not strict.
func (p *Partition) AppendOwn(batch []byte, flush Flush) (int64, error) {
	return p.appendOwn(batch, false, flush)
}

// AppendMarker appends a transaction marker as AppendOwn does, but leaves
// out a marker that cannot belong to this producer's transaction here:
// one whose epoch is below the producer's epoch on this partition, or,
// strict (markers whose epoch was bumped above their data's:
// txn.Metadata.StrictMarkers), not above it. Such a marker repeats a
// decision already marked here, and the producer has since written at
// that epoch, so written again it would end the producer's next
// transaction with the old decision. For a marker left out it returns
// the log end, which is what WaitCommitted must then reach.
func (p *Partition) AppendMarker(batch []byte, strict bool, flush Flush) (int64, error) {
	return p.appendOwn(batch, strict, flush)
}

func (p *Partition) appendOwn(batch []byte, strict bool, flush Flush) (int64, error) {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return 0, err
	}
	var admit func() (*Appended, error)
	if h.Control() {
		recs, err := recordbatch.Records(batch, 1<<16)
		if err != nil || len(recs) != 1 {
			return 0, fmt.Errorf("marker batch: %d records, %v", len(recs), err)
		}
		coordEpoch, err := txn.ParseControlValue(recs[0].Value)
		if err != nil {
			return 0, err
		}
		admit = func() (*Appended, error) {
			p.txnMu.Lock()
			fenced := p.txns.FencedMarker(h.ProducerID, coordEpoch)
			p.txnMu.Unlock()
			if fenced {
				return nil, &Refusal{Code: errTransactionCoordinatorFenced, Transaction: true}
			}
			if e, ok := p.producers.EpochOf(h.ProducerID); ok && (h.ProducerEpoch < e || strict && h.ProducerEpoch == e) {
				end := p.log.EndOffset()
				return &Appended{Base: end, Last: end - 1, Duplicate: true}, nil
			}
			return nil, nil
		}
	}
	res, stateErr, err := p.write(byBroker, [][]byte{batch}, []recordbatch.Header{h}, flush, admit)
	if err == nil {
		err = stateErr
	}
	if err != nil {
		return 0, err
	}
	if res.Duplicate && flush == FlushNow {
		// A marker left out still starts the pass its caller's other
		// appends (FlushWithRequest) wait for.
		p.flush.Kick()
	}
	return res.Last + 1, nil
}

// AppendReplica appends a batch shipped from the leader at the leader's
// offset and epoch. It returns the fence's error when this replica may not
// follow. The follower syncs its copies itself; its high watermark comes
// from the leader (Follow).
func (p *Partition) AppendReplica(batch []byte) error { return p.appendAsIs(byReplica, batch) }

// AppendCopy appends a batch copied from another replication group's
// leader at that leader's offset and epoch, on the leader of the group a
// move takes the partition to. It is synced as the leader's own appends
// are, and reaches this group's followers as any append does. It returns
// the fence's error when this replica may not copy.
func (p *Partition) AppendCopy(batch []byte) error { return p.appendAsIs(byCopy, batch) }

// appendAsIs appends a batch at the offset and epoch it carries.
func (p *Partition) appendAsIs(w writer, batch []byte) error {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return err
	}
	_, stateErr, err := p.write(w, [][]byte{batch}, []recordbatch.Header{h}, FlushNow, nil)
	if stateErr != nil {
		p.logger.Error("producer state update failed", "err", stateErr)
	}
	return err
}

// ResetCopy empties the log and restarts it at offset on a group's
// leader: a move's target starting its copy where the source's log
// starts, or a source dropping the copy it handed over. The followers
// take the reset through their own truncation rules.
func (p *Partition) ResetCopy(offset int64) error {
	return p.cutWith(p.fence.Copying, func() error { return p.log.TruncateFullyAndStartAt(offset) })
}

// Truncate cuts the log at offset and rebuilds the producer and
// transaction state from what is left (a follower whose leader's log
// diverged). It returns the fence's error when this replica may not follow.
func (p *Partition) Truncate(offset int64) error {
	return p.cut(func() error { return p.log.Truncate(offset) })
}

// TruncateFullyAndStartAt empties the log and restarts it at offset.
func (p *Partition) TruncateFullyAndStartAt(offset int64) error {
	return p.cut(func() error { return p.log.TruncateFullyAndStartAt(offset) })
}

// cut runs a truncation under the append lock; the high watermark never
// stays above the new log end.
func (p *Partition) cut(truncate func() error) error {
	return p.cutWith(p.fence.Following, truncate)
}

func (p *Partition) cutWith(may func() error, truncate func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := may(); err != nil {
		return err
	}
	if err := truncate(); err != nil {
		return err
	}
	end := p.log.EndOffset()
	p.storeHW(func(cur int64) int64 { return min(cur, end) })
	return p.rebuildState()
}
