// Package txncoord is the transaction coordinator: it owns every
// transactional id's state, the __transaction_state topic that state is
// written to and rebuilt from, and the decisions it writes to the data
// partitions as commit and abort markers.
//
// It writes only through the coordinator.Writer it is given (state
// records and markers alike) and asks the broker for nothing else than
// Host offers. It does not touch the group coordinator's state: a
// transaction's committed offsets are written, applied and dropped by
// Offsets, which it only calls. It decides no leadership and takes no
// request from the wire: the broker's API layer decodes, authorizes and
// routes, then calls an exported method here. Nothing outside resets its
// state: a new leader calls Reload.
package txncoord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

// StateTopic holds every transactional id's state. A transition is
// written there (and fsynced) before it takes effect, so a restart resumes
// exactly the decisions clients were told about.
const StateTopic = "__transaction_state"

// markerTimeout bounds the wait for a transaction's markers (and the
// writes that go with them), all together.
const markerTimeout = 10 * time.Second

// Host is what the coordinator needs of the broker besides its Writer.
type Host interface {
	// Partition returns a topic's partition, nil when the topic or the
	// partition does not exist.
	Partition(topic string, index int32) *partition.Partition
	// Partitions returns every partition whose open transactions this
	// coordinator answers for (orphans among them are aborted at load):
	// every partition of a single group, none in cluster mode, where a
	// partition's open transaction may be another group's coordinator's.
	Partitions() []*partition.Partition
	// Owned returns the partitions of StateTopic whose transactional ids
	// this broker coordinates (every partition, but in cluster mode only
	// those its replication group owns), none before it is created.
	Owned(topic string) []*partition.Partition
	// Internal reports whether topic is one of the broker's own topics,
	// which no transaction adds directly (the offsets topic joins
	// through AddOffsetsToTxn and TxnOffsetCommit).
	Internal(topic string) bool
	// NextProducerID hands out a producer id no producer had.
	NextProducerID() (int64, error)
	// Leading reports whether this broker writes its own state now: it
	// is neither a follower nor a failover replica that lost its lead.
	Leading() bool
	// Remote reports whether a partition lives in another replication
	// group of a cluster (docs/CLUSTER.md): it may join a transaction,
	// and its markers go through WriteRemoteMarkers.
	Remote(topic string, index int32) bool
	// AppendMarker appends a marker to a partition this broker holds, as
	// the Writer appends the coordinator's own records, leaving out one
	// that repeats a decision (partition.AppendMarker; strict:
	// txn.Metadata.StrictMarkers).
	AppendMarker(p *partition.Partition, batch []byte, strict bool, flush partition.Flush) (int64, error)
	// WriteRemoteMarkers writes the producer's commit or abort marker,
	// stamped with coordinatorEpoch, to partitions of other groups (each
	// appended there as AppendMarker does), and returns once each is
	// durable there, or with an error when ctx ends first (the caller
	// retries) or a partition refused the marker as a zombie
	// coordinator's (the caller is one).
	WriteRemoteMarkers(ctx context.Context, pid int64, epoch int16, commit, strict bool, coordinatorEpoch int32, tps []txn.TP) error
	// Epoch is the leader epoch clients see for p. A marker carries that
	// of its transactional id's state partition as its coordinator
	// epoch, which only grows across failovers and moves; a partition
	// refuses a producer's marker from a coordinator epoch below that of
	// the producer's last marker there.
	Epoch(p *partition.Partition) int32
}

// Offsets is the group coordinator's side of a transaction that commits
// offsets.
type Offsets interface {
	// PartitionOf returns the partition of the offsets topic that holds
	// group's offsets, creating the topic if there is none, before a
	// transaction names the partition.
	PartitionOf(group string) (int32, error)
	// WriteTxnOffsets validates a TxnOffsetCommit against its group and
	// writes its commits as the transaction's producer id and epoch,
	// pending until the transaction ends; it answers the request's code.
	// The coordinator calls it holding the transactional id's lock, so no
	// marker of the transaction is written meanwhile; in cluster mode the
	// group's partition may be in another replication group, which the
	// broker's implementation calls.
	WriteTxnOffsets(ctx context.Context, pid int64, epoch int16, r *kmsg.TxnOffsetCommitRequest) int16
	// EndTxn applies (commit) or drops a producer's pending commits,
	// once its marker on the offsets topic is committed (on this broker's
	// partitions: another group's apply their own when their marker is).
	EndTxn(pid int64, commit bool)
}

// Config is what a Coordinator is built with.
type Config struct {
	Writer  coordinator.Writer
	Host    Host
	Offsets Offsets
	// OffsetsTopic is the group coordinator's topic: a transaction that
	// commits a group's offsets includes the group's partition of it, and
	// gets a marker there.
	OffsetsTopic string
	Log          *slog.Logger
	// Clock stamps transactions' start and update times and is the "now"
	// their timeouts and transactional-id expiry compare them with (nil:
	// clock.New()).
	Clock *clock.Clock
	// Ctx is the broker's life: the waits for markers outlive the request
	// that decided them, but not the broker.
	Ctx context.Context
	// IDExpirationMs is Kafka's transactional.id.expiration.ms;
	// IDExpirationCheckMs is how often Run looks for such ids.
	IDExpirationMs      int64
	IDExpirationCheckMs int64
	// ExpiredIDs counts the ids expired, for the broker's stats (nil:
	// not counted).
	ExpiredIDs *atomic.Int64
}

// Coordinator is the transaction coordinator. Transitions of one
// transactional id are serialised by its entry's mutex; different ids
// proceed in parallel. The current state is published through an atomic
// pointer so produce-path checks never wait for a transition.
type Coordinator struct {
	cfg     Config
	w       coordinator.Writer
	host    Host
	offsets Offsets
	log     *slog.Logger

	mu    sync.Mutex
	byID  map[string]*entry
	byPID map[int64]*entry
}

type entry struct {
	mu   sync.Mutex
	meta atomic.Pointer[txn.Metadata]
	// stateEnd is the __transaction_state offset durability must reach
	// for meta to be on disk (guarded by mu).
	stateEnd int64
	// removed is set (under mu) once the id expired and the entry left
	// the coordinator's maps: a caller that found the entry before must
	// look the id up again (lockEntry).
	removed bool
}

// New returns a coordinator that knows no transactional id yet: Load or
// Reload fills it from StateTopic.
func New(cfg Config) *Coordinator {
	if cfg.ExpiredIDs == nil {
		cfg.ExpiredIDs = new(atomic.Int64)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.New()
	}
	return &Coordinator{cfg: cfg, w: cfg.Writer, host: cfg.Host, offsets: cfg.Offsets, log: cfg.Log,
		byID: map[string]*entry{}, byPID: map[int64]*entry{}}
}

// stateConfigs are the configs StateTopic is created with: compaction
// keeps each id's last state, which is all a reload needs.
func stateConfigs() map[string]string { return map[string]string{"cleanup.policy": "compact"} }

// StateConfigs are the configs the coordinator gives its state topic.
func StateConfigs() map[string]string { return stateConfigs() }

func (c *Coordinator) entry(id string, create bool) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil && create {
		e = &entry{}
		c.byID[id] = e
	}
	return e
}

// lockEntry finds and locks a transactional id's entry (creating it if
// create), never one that expired meanwhile; nil when there is none.
func (c *Coordinator) lockEntry(id string, create bool) *entry {
	for {
		e := c.entry(id, create)
		if e == nil {
			return nil
		}
		e.mu.Lock()
		if !e.removed {
			return e
		}
		e.mu.Unlock()
	}
}

// lockTxn finds and locks a transactional id's entry and validates the
// producer; the caller unlocks e.mu when code is 0.
func (c *Coordinator) lockTxn(id string, pid int64, epoch int16, newErrors bool) (*entry, int16) {
	e := c.lockEntry(id, false)
	if e == nil {
		return nil, txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if m == nil {
		e.mu.Unlock()
		return nil, txn.ErrInvalidProducerIDMapping
	}
	if code := m.CheckProducer(pid, epoch, newErrors); code != 0 {
		e.mu.Unlock()
		return nil, code
	}
	return e, 0
}

// install publishes m as e's state.
func (c *Coordinator) install(e *entry, m *txn.Metadata) {
	c.mu.Lock()
	if old := e.meta.Load(); old != nil && old.ProducerID != m.ProducerID {
		delete(c.byPID, old.ProducerID)
	}
	c.byPID[m.ProducerID] = e
	c.mu.Unlock()
	e.meta.Store(m)
}

// byProducer returns the entry of a producer id's transactional id.
func (c *Coordinator) byProducer(pid int64) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPID[pid]
}

// CheckProduce validates a transactional batch: its producer must have an
// ongoing transaction, at this epoch, that includes the partition. This is
// what keeps a delayed or zombie write out of a later transaction.
func (c *Coordinator) CheckProduce(pid int64, epoch int16, topic string, partition int32) int16 {
	e := c.byProducer(pid)
	if e == nil {
		return txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if m == nil || m.ProducerID != pid {
		return txn.ErrInvalidProducerIDMapping
	}
	switch {
	case epoch < m.Epoch:
		return txn.ErrInvalidProducerEpoch
	case epoch > m.Epoch || m.State != kmsg.TransactionStateOngoing:
		return txn.ErrInvalidTxnState
	}
	if _, ok := m.Partitions[txn.TP{Topic: topic, Partition: partition}]; !ok {
		return txn.ErrInvalidTxnState
	}
	return 0
}

// AddImplicit adds a partition to the producer's transaction, as Produce
// v12+ does under transactions v2. Adding a partition that is already in
// the transaction costs no write.
func (c *Coordinator) AddImplicit(ctx context.Context, pid int64, epoch int16, tp txn.TP) int16 {
	p, end, code := c.AddImplicitAll(pid, epoch, []txn.TP{tp}, partition.FlushNow)
	if code == 0 && p != nil && c.w.Wait(ctx, p, end) != nil {
		return kerr.RequestTimedOut.Code
	}
	return code
}

// AddImplicitAll adds several partitions with one state write, so a produce
// request that opens a transaction on many partitions needs one record. The
// write is not waited for here: the produce's acknowledgement waits for it
// together with the data (returned as p and end; p is nil when nothing was
// written). Should a crash keep the data but lose this record, the start-up
// sweep aborts the orphaned transaction, so no partition hangs. flush is
// the state record's: a produce passes partition.FlushWithRequest, so that
// the one pass it starts after its data syncs the record too, instead of a
// pass of the record's own that the data would miss and wait behind.
func (c *Coordinator) AddImplicitAll(pid int64, epoch int16, tps []txn.TP, flush partition.Flush) (*partition.Partition, int64, int16) {
	e := c.byProducer(pid)
	if e == nil {
		return nil, 0, txn.ErrInvalidProducerIDMapping
	}
	if m := e.meta.Load(); m.State == kmsg.TransactionStateOngoing && m.Epoch == epoch {
		all := true
		for _, tp := range tps {
			_, ok := m.Partitions[tp]
			all = all && ok
		}
		if all {
			return nil, 0, 0
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.removed {
		return nil, 0, txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if code := m.CheckProducer(pid, epoch, true); code != 0 {
		if epoch < m.Epoch {
			return nil, 0, txn.ErrInvalidProducerEpoch
		}
		return nil, 0, code
	}
	for _, tp := range tps {
		if !c.joinable(tp) {
			return nil, 0, kerr.UnknownTopicOrPartition.Code
		}
	}
	next, code := m.AddPartitions(tps, c.cfg.Clock.Now().UnixMilli())
	if code != 0 {
		return nil, 0, code
	}
	next.ClientTransactionVersion = 2 // only transactions v2 adds by producing
	p, end, err := c.appendState(e, next, flush)
	if errors.Is(err, coordinator.ErrBelowMinISR) {
		return nil, 0, kerr.NotEnoughReplicas.Code
	}
	if err != nil {
		return nil, 0, kerr.KafkaStorageError.Code
	}
	c.install(e, next)
	return p, end, 0
}

// joinable reports whether a partition may join a transaction: it exists
// and is not one of the broker's own topics.
func (c *Coordinator) joinable(tp txn.TP) bool {
	return (c.host.Partition(tp.Topic, tp.Partition) != nil || c.host.Remote(tp.Topic, tp.Partition)) && !c.host.Internal(tp.Topic)
}

// hasRemote reports whether a transaction holds a partition of another
// group.
func (c *Coordinator) hasRemote(m *txn.Metadata) bool {
	_, _, remote := c.markerTargets(m)
	return len(remote) > 0
}

// MarkerBatch is the control batch that commits or aborts a producer's
// transaction on a partition.
func MarkerBatch(pid int64, epoch int16, commit bool, coordinatorEpoch int32, nowMs int64) ([]byte, error) {
	typ := txn.ControlAbort
	if commit {
		typ = txn.ControlCommit
	}
	return recordbatch.Encode(recordbatch.BatchOptions{
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, Transactional: true, Control: true,
	}, []recordbatch.Record{{Key: txn.ControlKey(typ), Value: txn.ControlValue(coordinatorEpoch), Timestamp: nowMs}})
}

// writeState appends m to StateTopic and waits until durable.
func (c *Coordinator) writeState(ctx context.Context, e *entry, m *txn.Metadata) error {
	p, end, err := c.appendState(e, m, partition.FlushNow)
	if err != nil {
		return err
	}
	return c.w.Wait(ctx, p, end)
}

// statePartition is the partition of StateTopic that holds id's state.
func (c *Coordinator) statePartition(id string) (*partition.Partition, error) {
	return c.w.Partition(StateTopic, id, stateConfigs())
}

// appendState appends e's next state m to StateTopic without waiting,
// returning the offset durability must reach. The caller holds e.mu.
// FlushLazily is for a record nobody waits for and whose loss recovery
// repairs: it is synced with the next write that is waited for.
func (c *Coordinator) appendState(e *entry, m *txn.Metadata, flush partition.Flush) (*partition.Partition, int64, error) {
	p, err := c.statePartition(m.ID)
	if err != nil {
		return nil, 0, err
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{
		Key: txn.EncodeKey(m.ID), Value: txn.EncodeValue(m), Timestamp: c.cfg.Clock.Now().UnixMilli(),
	}})
	if err != nil {
		return nil, 0, err
	}
	end, err := c.w.Append(p, batch, flush)
	if err != nil {
		return nil, 0, err
	}
	e.stateEnd = end
	return p, end, nil
}

// transition writes m and then publishes it.
func (c *Coordinator) transition(ctx context.Context, e *entry, m *txn.Metadata) error {
	if err := c.writeState(ctx, e, m); err != nil {
		return err
	}
	c.install(e, m)
	return nil
}

// writeMarkers appends a commit or abort marker to every partition of the
// transaction and waits until all are durable, together with the writes
// in also; committed offsets of the transaction become visible once their
// marker is.
func (c *Coordinator) writeMarkers(m *txn.Metadata, commit bool, also ...partition.Wait) error {
	coordEpoch, err := c.coordinatorEpoch(m)
	if err != nil {
		return err
	}
	batch0, err := MarkerBatch(m.ProducerID, m.Epoch, commit, coordEpoch, c.cfg.Clock.Now().UnixMilli())
	if err != nil {
		return err
	}
	waits := also
	offsetsTouched := false
	strict := m.StrictMarkers()
	local, parts, remote := c.markerTargets(m)
	for i, tp := range local {
		// The last marker starts the group-commit pass and the others
		// only mark their partitions, so that one pass syncs them all:
		// started by the first, it would leave the rest to a second.
		flush := partition.FlushWithRequest
		if i == len(local)-1 {
			flush = partition.FlushNow
		}
		batch := append([]byte(nil), batch0...)
		end, err := c.host.AppendMarker(parts[i], batch, strict, flush)
		if err != nil {
			return fmt.Errorf("marker for %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		waits = append(waits, partition.Wait{P: parts[i], Offset: end})
		offsetsTouched = offsetsTouched || tp.Topic == c.cfg.OffsetsTopic
	}
	// The broker's context, not the request's: a client that disconnects
	// mid-EndTxn must not leave a decided transaction half-marked. One
	// deadline for all: the waits run out together, as one wait would.
	wctx, cancel := context.WithTimeout(c.cfg.Ctx, markerTimeout)
	defer cancel()
	remoteDone := make(chan error, 1)
	if len(remote) > 0 {
		go func() {
			remoteDone <- c.host.WriteRemoteMarkers(wctx, m.ProducerID, m.Epoch, commit, strict, coordEpoch, remote)
		}()
	} else {
		remoteDone <- nil
	}
	for _, w := range waits {
		if c.w.Wait(wctx, w.P, w.Offset) != nil {
			<-remoteDone
			return coordinator.ErrCommitTimeout
		}
	}
	if err := <-remoteDone; err != nil {
		return fmt.Errorf("markers in other groups: %w", err)
	}
	if offsetsTouched {
		c.offsets.EndTxn(m.ProducerID, commit)
	}
	return nil
}

// markerTargets splits m's partitions into those this broker holds (local,
// with their partitions) and those another group leads (remote); a
// partition in neither was deleted since, or never valid, and gets no
// marker.
func (c *Coordinator) markerTargets(m *txn.Metadata) (local []txn.TP, parts []*partition.Partition, remote []txn.TP) {
	for _, tp := range m.SortedPartitions() {
		p := c.host.Partition(tp.Topic, tp.Partition)
		if p == nil {
			if c.host.Remote(tp.Topic, tp.Partition) {
				remote = append(remote, tp)
			}
			continue
		}
		local, parts = append(local, tp), append(parts, p)
	}
	return local, parts, remote
}

// coordinatorEpoch is the coordinator epoch m's markers carry: the
// leader epoch of its transactional id's state partition. An orphan
// (no transactional id: its coordinator lost it) gets the epoch of the
// producer's last marker on its partitions, which closes the orphan
// without fencing any coordinator.
func (c *Coordinator) coordinatorEpoch(m *txn.Metadata) (int32, error) {
	if m.ID == "" {
		var e int32
		for tp := range m.Partitions {
			if p := c.host.Partition(tp.Topic, tp.Partition); p != nil {
				if mk, ok := p.LastMarker(m.ProducerID); ok {
					e = max(e, mk.CoordinatorEpoch)
				}
			}
		}
		return e, nil
	}
	st, err := c.statePartition(m.ID)
	if err != nil {
		return 0, err
	}
	return c.host.Epoch(st), nil
}

// finish completes a transaction whose Prepare* state is current: markers,
// then the Complete* state. also are writes to wait for with the markers.
func (c *Coordinator) finish(e *entry, also ...partition.Wait) error {
	m := e.meta.Load()
	if err := c.writeMarkers(m, m.Committing(), also...); err != nil {
		return err
	}
	done := m.Complete(c.cfg.Clock.Now().UnixMilli())
	if m.NextProducerID == -2 {
		if err := c.bump(done); err != nil {
			return err
		}
	}
	// The outcome is already durable (Prepare* state and markers), so the
	// Complete* record need not be waited for: if it is lost, recovery
	// finds the Prepare* state and completes again, which is idempotent.
	if _, _, err := c.appendState(e, done, partition.FlushLazily); err != nil {
		return err
	}
	c.install(e, done)
	return nil
}

// bump moves m to the next epoch, or to a fresh producer id when the epoch
// space is used up.
func (c *Coordinator) bump(m *txn.Metadata) error {
	m.NextProducerID = 0
	if m.Epoch < math.MaxInt16-2 {
		m.Epoch++
		return nil
	}
	pid, err := c.host.NextProducerID()
	if err != nil {
		return err
	}
	m.ProducerID, m.Epoch = pid, 0
	return nil
}

// end decides and completes a transaction (commit or abort). fence bumps
// the epoch first, as a timeout abort and every transactions-v2 EndTxn do,
// so the old epoch's later requests are refused. v2 is a transactions-v2
// EndTxn's.
func (c *Coordinator) end(ctx context.Context, e *entry, commit, fence, v2 bool) int16 {
	m := e.meta.Load()
	action, prepared, code := m.End(commit, c.cfg.Clock.Now().UnixMilli())
	if prepared != nil {
		// The decision says whether its markers are bumped above its
		// data (txn.Metadata.StrictMarkers): an EndTxn of transactions
		// v1 leaves them at the data's epoch, whatever came before.
		switch {
		case v2:
			prepared.ClientTransactionVersion = 2
		case !fence:
			prepared.ClientTransactionVersion = 0
		}
	}
	if fence && action == txn.EndFail && code == txn.ErrInvalidTxnState && m.State != kmsg.TransactionStateOngoing && !commit {
		// Transactions v2: aborting with nothing open is legal and
		// still bumps the epoch.
		next := m.Clone()
		next.State = kmsg.TransactionStateCompleteAbort
		if v2 {
			next.ClientTransactionVersion = 2
		}
		if err := c.bump(next); err != nil {
			return kerr.KafkaStorageError.Code
		}
		if err := c.transition(ctx, e, next); err != nil {
			return coordinator.Code(err)
		}
		return 0
	}
	switch action {
	case txn.EndDone:
		return 0
	case txn.EndFail:
		return code
	}
	if fence {
		if prepared.Epoch >= math.MaxInt16-2 {
			// Out of epochs: markers go out under the current epoch,
			// and the completed state moves to a fresh producer id.
			prepared.NextProducerID = -2
		} else {
			prepared.Epoch++
		}
	}
	var also []partition.Wait
	// The one-round path needs every marker where recoverFromMarkers
	// looks: a transaction over another group's partitions writes its
	// decision durably before any marker.
	local, _, remote := c.markerTargets(prepared)
	if prepared.Epoch == m.Epoch+1 && len(remote) == 0 {
		// One durable round: the decision and its markers are written
		// together. The markers carry the new epoch, which no other
		// write of this producer can have before the decision is
		// acknowledged, so a restart that lost the decision record but
		// kept a marker reads the decision from the marker
		// (recoverFromMarkers). That requires the Ongoing state (with
		// its partitions) to be on disk before any marker is.
		if st, err := c.statePartition(m.ID); err == nil && st.HighWatermark() < e.stateEnd &&
			c.w.Wait(ctx, st, e.stateEnd) != nil {
			return kerr.RequestTimedOut.Code
		}
		// The last marker starts the pass that syncs the decision too
		// (writeMarkers); with no marker to write here, the decision
		// starts its own.
		flush := partition.FlushNow
		if len(local) > 0 {
			flush = partition.FlushWithRequest
		}
		p, end, err := c.appendState(e, prepared, flush)
		if err != nil {
			c.log.Error("writing transaction state failed", "transactional_id", m.ID, "err", err)
			return coordinator.Code(err)
		}
		// Decided: from here on this process completes it, whatever the
		// request's fate (finish is idempotent and retried).
		c.install(e, prepared)
		also = append(also, partition.Wait{P: p, Offset: end})
	} else if err := c.transition(ctx, e, prepared); err != nil {
		c.log.Error("writing transaction state failed", "transactional_id", m.ID, "err", err)
		return coordinator.Code(err)
	}
	if err := c.finish(e, also...); err != nil {
		// The decision is durable; recovery or the next request will
		// finish it.
		c.log.Error("completing transaction failed", "transactional_id", m.ID, "err", err)
		return coordinator.Code(err)
	}
	return 0
}
