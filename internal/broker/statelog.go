package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

// stateLog keeps an in-memory view of a broker-owned internal topic (users,
// ACLs) up to date by replaying it: from the start the first time and
// whenever the topic was replaced, then whatever its high watermark has
// reached since the last look.
//
// Replaying on demand, rather than only at start, is what keeps a follower
// (whose copy of the topic grows by replication) and a replica that has just
// become leader right without hooks in the replication code: the log is
// the truth, memory only caches it.
type stateLog struct {
	b    *Broker
	name string
	// reset forgets everything applied; apply applies one record (a nil
	// Value is a tombstone). Both run under mu.
	reset func()
	apply func(r recordbatch.Record) error

	mu sync.Mutex
	// id is the incarnation replayed (zero: none yet); next is the offset
	// after the last batch applied. next is also read without mu for the
	// fast path.
	id   [16]byte
	next atomic.Int64
	// idSet is published with next, for the fast path.
	idSet atomic.Pointer[[16]byte]
}

func newStateLog(b *Broker, name string, reset func(), apply func(recordbatch.Record) error) *stateLog {
	return &stateLog{b: b, name: name, reset: reset, apply: apply}
}

// catchUp applies what the topic holds below its high watermark and
// memory does not have yet.
func (l *stateLog) catchUp() error {
	t := l.b.lookup(l.name)
	if t == nil || len(t.partitions) == 0 {
		if l.idSet.Load() == nil {
			return nil
		}
	} else if id := l.idSet.Load(); id != nil && *id == t.id && t.partitions[0].HighWatermark() <= l.next.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t = l.b.lookup(l.name)
	if t == nil || len(t.partitions) == 0 {
		// The topic is gone (a follower dropped it to recopy it): what
		// it held no longer counts.
		if l.id != ([16]byte{}) {
			l.reset()
			l.id = [16]byte{}
			l.next.Store(0)
			l.idSet.Store(nil)
		}
		return nil
	}
	p := t.partitions[0]
	next := l.next.Load()
	if t.id != l.id || p.Log().StartOffset() > next {
		l.reset()
		l.id = t.id
		next = p.Log().StartOffset()
	}
	hw := p.HighWatermark()
	err := p.Scan(next, hw, func(h recordbatch.Header, batch []byte) error {
		if !h.Control() {
			recs, err := recordbatch.Records(batch, 64<<20)
			if err != nil {
				return fmt.Errorf("%s batch at %d: %w", l.name, h.BaseOffset, err)
			}
			for _, r := range recs {
				if err := l.apply(r); err != nil {
					l.b.log.Warn("skipping an undecodable record of an internal topic", "topic", l.name, "offset", r.Offset, "err", err)
				}
			}
		}
		next = h.LastOffset() + 1
		return nil
	})
	if err == nil && next < hw {
		// Nothing left below hw (compaction can leave a gap at the end):
		// do not scan the gap again on every call.
		next = hw
	}
	l.next.Store(next)
	id := l.id
	l.idSet.Store(&id)
	if err != nil {
		return fmt.Errorf("replay %s: %w", l.name, err)
	}
	return nil
}

// writeStateRecords appends records to a broker-owned internal topic and
// waits until they are durable (and, replicated, committed).
func (b *Broker) writeStateRecords(ctx context.Context, name string, recs []recordbatch.Record) error {
	if b.cl != nil {
		return b.cl.writeSecurity(ctx, name, recs)
	}
	p, err := b.internalPartition(name, map[string]string{"cleanup.policy": "compact"})
	if err != nil {
		return err
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
	if err != nil {
		return err
	}
	end, err := b.appendOwn(p, batch)
	if err != nil {
		return err
	}
	return b.waitOwn(ctx, p, end)
}

// stateWriteError is the Kafka error for a failed writeStateRecords.
func stateWriteError(err error) int16 {
	var me metaWriteError
	switch {
	case errors.As(err, &me):
		return me.code
	case errors.Is(err, errNotServing):
		return errNotLeaderOrFollower
	case errors.Is(err, errCommitTimeout):
		return errRequestTimedOut
	case errors.Is(err, errBelowMinISR):
		return errNotEnoughReplicas
	}
	return errKafkaStorageError
}
