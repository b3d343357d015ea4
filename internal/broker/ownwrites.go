package broker

import (
	"context"
	"errors"
	"time"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
)

// ownWriter is the coordinator.Writer the broker hands its coordinators:
// their one way to create, append to and wait on an internal topic.
type ownWriter struct{ b *Broker }

func (w ownWriter) Partition(name, key string, configs map[string]string) (*partition.Partition, error) {
	t, err := w.b.coordinatorTopic(name, configs)
	if err != nil {
		return nil, err
	}
	index := coordinator.PartitionFor(key, len(t.partitions))
	if _, foreign := w.b.foreignPartition(name, index); foreign {
		return nil, coordinator.ErrNotServing
	}
	return t.partitions[index], nil
}

func (w ownWriter) Append(p *partition.Partition, batch []byte, flush partition.Flush) (int64, error) {
	return w.b.appendInternal(p, batch, flush)
}

func (w ownWriter) Wait(ctx context.Context, p *partition.Partition, end int64) error {
	return w.b.waitOwn(ctx, p, end)
}

// The errors of the broker's own writes are the coordinators' (one set,
// so a coordinator maps them to Kafka codes without knowing the broker).
var (
	errCommitTimeout  = coordinator.ErrCommitTimeout
	errBelowMinISR    = coordinator.ErrBelowMinISR
	errStoppedLeading = coordinator.ErrStoppedLeading
)

// coordinatorCode is the code a coordinator answers for a failed write.
func coordinatorCode(err error) int16 { return coordinator.Code(err) }

// waitOwn waits until the broker's own write to p ending at end is
// committed (in failover mode: on the ISR), at most ownWriteTimeout.
func (b *Broker) waitOwn(ctx context.Context, p *partition.Partition, end int64) error {
	ctx, cancel := context.WithTimeout(ctx, ownWriteTimeout)
	defer cancel()
	switch err := p.WaitCommitted(ctx, end); {
	case err == nil:
		return nil
	case errors.Is(err, partition.ErrStoppedLeading):
		return errStoppedLeading
	case errors.Is(err, partition.ErrHeld):
		return errBelowMinISR
	}
	return errCommitTimeout
}

// ownWriteTimeout bounds how long the broker waits for one of its own
// writes to be committed.
const ownWriteTimeout = 10 * time.Second

// coordinatorTopic returns a coordinator's topic (the offsets or the
// transaction state topic), creating it on first use: with one partition
// in a single replication group, where one leader coordinates everything,
// and in cluster mode with Cluster.CoordinatorPartitions spread over the
// groups, created through the metadata log. Its partition count never
// changes once created: a key's partition (coordinator.PartitionFor)
// depends on it.
func (b *Broker) coordinatorTopic(name string, configs map[string]string) (*topic, error) {
	if b.cl != nil {
		return b.cl.coordinatorTopic(name)
	}
	if _, err := b.internalPartition(name, configs); err != nil {
		return nil, err
	}
	return b.lookup(name), nil
}

// internalPartition returns partition 0 of an internal topic, creating the
// topic on first use.
func (b *Broker) internalPartition(name string, configs map[string]string) (*partition.Partition, error) {
	if t := b.lookup(name); t != nil {
		return t.partitions[0], nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name]; t != nil {
		return t.partitions[0], nil
	}
	t, err := b.createTopicLocked(name, 1, configs)
	if err != nil {
		return nil, err
	}
	return t.partitions[0], nil
}

// appendOwn appends a batch the broker wrote itself (producer-id blocks,
// users and ACLs; the coordinators append through ownWriter), keeps the partition's producer and transaction state
// in step with it, and schedules it for the next group commit. It returns
// the offset after the batch: what waitOwn must reach. Internal writes are
// acks=all writes: refused before the append while p's ISR is below
// min.insync.replicas, as Kafka's coordinators are.
func (b *Broker) appendOwn(p *partition.Partition, batch []byte) (int64, error) {
	return b.appendInternal(p, batch, partition.FlushNow)
}

func (b *Broker) appendInternal(p *partition.Partition, batch []byte, flush partition.Flush) (int64, error) {
	if b.notEnoughReplicas(p, b.minISROf(p)) {
		return 0, errBelowMinISR
	}
	return p.AppendOwn(batch, flush)
}

// appendMarker appends a transaction marker the coordinator wrote
// (partition.AppendMarker says which it leaves out). Like every internal
// write it is an acks=all write: refused before the append while p's ISR
// is below min.insync.replicas, as Kafka's coordinators are.
func (b *Broker) appendMarker(p *partition.Partition, batch []byte, strict bool, flush partition.Flush) (int64, error) {
	if b.notEnoughReplicas(p, b.minISROf(p)) {
		return 0, errBelowMinISR
	}
	return p.AppendMarker(batch, strict, flush)
}
