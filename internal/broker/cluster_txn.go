package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/txncoord"
)

// Transactions across groups in cluster mode. A transactional id's
// coordinator lives in the group owning its partition of
// __transaction_state; a transaction may hold partitions of any group, and
// commit the offsets of a consumer group coordinated in yet another.
// Between groups, over the replication port and its Token, as JSON:
//
//   - PathTxnCheck: a partition leader in another group asks the
//     coordinator whether a producer's transaction is ongoing and holds
//     the partition, before the producer's first transactional batch on
//     it (KIP-890's verification), or asks it to add the partition
//     (Produce v12, transactions v2).
//   - PathTxnMarkers: the coordinator has the owner group's leader write
//     commit or abort markers (Kafka's WriteTxnMarkers), retried until
//     each is durable there; markers on the offsets topic also apply or
//     drop the transaction's pending offset commits there.
//   - PathTxnOffsetCommit: a consumer group's coordinator hands a
//     client's TxnOffsetCommit to the transactional id's coordinator,
//     which checks the transaction under the id's lock, as it does at
//     home, and then
//   - PathTxnOffsets: has the group's coordinator write the commits, as
//     the transaction's producer, still under that lock; so no marker of
//     the transaction can land between the check and the write.
//
// A transaction with a partition in another group writes its decision
// durably before any marker (txncoord's end), so a coordinator that fails
// over finds the decision in its own log and finishes it.

// Paths of the cross-group transaction calls.
const (
	PathTxnCheck        = "/cluster/txn/check"
	PathTxnMarkers      = "/cluster/txn/markers"
	PathTxnOffsetCommit = "/cluster/txn/offsetcommit"
	PathTxnOffsets      = "/cluster/txn/offsets"
)

// txnCheckRequest asks the coordinator about one producer's partitions.
type txnCheckRequest struct {
	TransactionalID string   `json:"transactionalId"`
	ProducerID      int64    `json:"producerId"`
	ProducerEpoch   int16    `json:"producerEpoch"`
	Partitions      []txn.TP `json:"partitions"`
	// Add adds the partitions (Produce v12) instead of only checking.
	Add bool `json:"add,omitempty"`
}

// txnMarkersRequest asks a group's leader to write markers.
type txnMarkersRequest struct {
	ProducerID    int64 `json:"producerId"`
	ProducerEpoch int16 `json:"producerEpoch"`
	Commit        bool  `json:"commit"`
	// CoordinatorEpoch is the leader epoch of the transactional id's
	// state partition at the coordinator (Kafka's WriteTxnMarkers
	// field): a partition refuses markers from a coordinator epoch below
	// that of the producer's last marker there.
	CoordinatorEpoch int32 `json:"coordinatorEpoch"`
	// Strict markers carry an epoch bumped above their data's
	// (txn.Metadata.StrictMarkers): a partition leaves one out once the
	// producer wrote at its epoch there. Absent from a coordinator of an
	// older build, which the partition then treats as not strict.
	Strict     bool     `json:"strict,omitempty"`
	Partitions []txn.TP `json:"partitions"`
}

// txnOffsetsRequest asks a consumer group's coordinator to write a
// transaction's offset commits as its producer.
type txnOffsetsRequest struct {
	ProducerID    int64                        `json:"producerId"`
	ProducerEpoch int16                        `json:"producerEpoch"`
	Commit        *kmsg.TxnOffsetCommitRequest `json:"commit"`
}

// txnAnswer is the Kafka error code of each partition, in request order
// (for a check: one code for all).
type txnAnswer struct {
	Codes []int16 `json:"codes"`
}

// remoteTxnCoordinator reports whether transactional id tid's coordinator
// is in another group, so that this group's partitions check its producer
// with it.
func (b *Broker) remoteTxnCoordinator(tid string) bool {
	return b.cl != nil && !b.cl.coordinates(txnCoordinator, tid)
}

// remoteTxnCheck asks tid's coordinator about a producer's transaction on
// tps (or adds them). It answers a Kafka code; a failed call is
// COORDINATOR_NOT_AVAILABLE, which producers retry.
func (c *clusterMode) remoteTxnCheck(ctx context.Context, tid string, pid int64, epoch int16, tps []txn.TP, add bool) int16 {
	id, ok := c.coordinatorLeader(1, tid)
	if !ok {
		return kerr.CoordinatorNotAvailable.Code
	}
	var ans txnAnswer
	if err := c.call(ctx, id, PathTxnCheck, txnCheckRequest{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch, Partitions: tps, Add: add}, &ans); err != nil || len(ans.Codes) != 1 {
		c.warn("cluster mode: asking the transaction coordinator failed", "coordinator", id, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return ans.Codes[0]
}

// writeRemoteMarkers has each owner group's leader write the marker of
// req (its partitions left empty) to its partitions among tps, retrying
// (a new leader, a group not yet created the topic) until every one is
// durable or ctx ends. A partition that refuses the marker as a zombie
// coordinator's ends it at once: a coordinator of a later epoch has
// taken over the transaction.
func (c *clusterMode) writeRemoteMarkers(ctx context.Context, req txnMarkersRequest, tps []txn.TP) error {
	left := slices.Clone(tps)
	var lastErr error
	for {
		byLeader := map[int32][]txn.TP{}
		for _, tp := range left {
			h, foreign := c.foreign(tp.Topic, tp.Partition)
			if !foreign {
				// Deleted, or moved into this group since (the
				// coordinator's own markers cover what it holds):
				// nothing to mark here.
				continue
			}
			byLeader[h.leader] = append(byLeader[h.leader], tp)
		}
		left = left[:0]
		for leader, part := range byLeader {
			var ans txnAnswer
			req.Partitions = part
			err := c.call(ctx, leader, PathTxnMarkers, req, &ans)
			if err == nil && len(ans.Codes) != len(part) {
				err = fmt.Errorf("broker %d answered %d codes for %d partitions", leader, len(ans.Codes), len(part))
			}
			if err != nil {
				lastErr = err
				left = append(left, part...)
				continue
			}
			for i, code := range ans.Codes {
				if code == errTransactionCoordinatorFenced {
					return fmt.Errorf("%s/%d on broker %d: %w", part[i].Topic, part[i].Partition, leader, kerr.TransactionCoordinatorFenced)
				}
				if code != 0 {
					lastErr = fmt.Errorf("%s/%d on broker %d: %v", part[i].Topic, part[i].Partition, leader, kerr.ErrorForCode(code))
					left = append(left, part[i])
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d partitions unmarked: %w", len(left), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// call posts a JSON request to a broker's replication port and decodes its
// JSON answer.
func (c *clusterMode) call(ctx context.Context, id int32, path string, req, answer any) error {
	br, ok := c.current().brokers[id]
	if id < 0 || !ok {
		return fmt.Errorf("no broker %d", id)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	r := c.b.repl
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.tls.Scheme()+"://"+br.ReplicationAddress+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if r.cfg.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.fwdClient().Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("broker %d answered %s: %s", id, resp.Status, strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, answer)
}

// mountTxnHandlers serves the cross-group transaction calls.
func (c *clusterMode) mountTxnHandlers(mux *http.ServeMux) {
	mux.HandleFunc(PathTxnCheck, c.serveTxnCheck)
	mux.HandleFunc(PathTxnMarkers, c.serveTxnMarkers)
	mux.HandleFunc(PathTxnOffsetCommit, c.serveTxnOffsetCommit)
	mux.HandleFunc(PathTxnOffsets, c.serveTxnOffsets)
}

// readJSON checks a cross-group call (token, method, this broker serving)
// and decodes its body; it answers the failure itself.
func (c *clusterMode) readJSON(w http.ResponseWriter, hr *http.Request, v any) bool {
	r := c.b.repl
	if !r.authorized(w, hr) {
		return false
	}
	if hr.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	if !r.role.serving() {
		http.Error(w, "this broker is not its group's serving leader", http.StatusServiceUnavailable)
		return false
	}
	if err := json.NewDecoder(io.LimitReader(hr.Body, maxForwardBytes)).Decode(v); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serveTxnCheck answers a partition leader of another group: is the
// producer's transaction ongoing with these partitions (or add them).
func (c *clusterMode) serveTxnCheck(w http.ResponseWriter, hr *http.Request) {
	var req txnCheckRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	code := int16(0)
	switch {
	case !c.coordinates(txnCoordinator, req.TransactionalID):
		code = errNotCoordinator
	case req.Add:
		ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
		defer cancel()
		for _, tp := range req.Partitions {
			if code = c.b.txns.AddImplicit(ctx, req.ProducerID, req.ProducerEpoch, tp); code != 0 {
				break
			}
		}
	default:
		for _, tp := range req.Partitions {
			if code = c.b.txns.CheckProduce(req.ProducerID, req.ProducerEpoch, tp.Topic, tp.Partition); code != 0 {
				break
			}
		}
	}
	writeJSON(w, txnAnswer{Codes: []int16{code}})
}

// serveTxnMarkers writes the coordinator's markers to this group's
// partitions and answers once they are committed.
func (c *clusterMode) serveTxnMarkers(w http.ResponseWriter, hr *http.Request) {
	var req txnMarkersRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	b := c.b
	batch0, err := txncoord.MarkerBatch(req.ProducerID, req.ProducerEpoch, req.Commit, req.CoordinatorEpoch, b.clock.Now().UnixMilli())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	codes := make([]int16, len(req.Partitions))
	type pending struct {
		i   int
		p   *partition.Partition
		end int64
	}
	var waits []pending
	for i, tp := range req.Partitions {
		if _, foreign := c.foreign(tp.Topic, tp.Partition); foreign {
			codes[i] = errNotLeaderOrFollower
			continue
		}
		t := c.local(tp.Topic)
		if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.partitions) {
			codes[i] = errUnknownTopicOrPartition
			continue
		}
		p := t.partitions[tp.Partition]
		end, err := b.appendMarker(p, slices.Clone(batch0), req.Strict, partition.FlushNow)
		var refused *partition.Refusal
		if errors.As(err, &refused) {
			codes[i] = refused.Code // a zombie coordinator's marker
			c.log.Warn("cluster mode: refused a transaction marker from a coordinator of an earlier epoch",
				"topic", tp.Topic, "partition", tp.Partition, "producer_id", req.ProducerID, "coordinator_epoch", req.CoordinatorEpoch)
			continue
		}
		if err != nil {
			codes[i] = coordinatorCode(err)
			if codes[i] == 0 {
				codes[i] = errKafkaStorageError
			}
			continue
		}
		waits = append(waits, pending{i, p, end})
	}
	ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
	defer cancel()
	offsetsMarked := false
	for _, pw := range waits {
		if err := b.waitOwn(ctx, pw.p, pw.end); err != nil {
			codes[pw.i] = coordinatorCode(err)
			if errors.Is(err, errStoppedLeading) {
				codes[pw.i] = errNotLeaderOrFollower
			}
			continue
		}
		offsetsMarked = offsetsMarked || pw.p.Topic == offsetsTopic
	}
	if offsetsMarked {
		// The marker is durable: the transaction's offset commits on
		// this group's partitions apply (or go), as the coordinator's
		// own group applies those on its partitions.
		b.groups.EndTxn(req.ProducerID, req.Commit)
	}
	writeJSON(w, txnAnswer{Codes: codes})
}

// txnOffsetCommit answers a client's TxnOffsetCommit on the consumer
// group's coordinator: the transactional id's coordinator checks the
// transaction and has the commits written, here or (in cluster mode, its
// id in another group) through PathTxnOffsetCommit.
func (b *Broker) txnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	if !b.remoteTxnCoordinator(r.TransactionalID) {
		return b.txns.TxnOffsetCommit(ctx, r)
	}
	c := b.cl
	id, ok := c.coordinatorLeader(1, r.TransactionalID)
	var resp kmsg.TxnOffsetCommitResponse
	if ok {
		err := c.call(ctx, id, PathTxnOffsetCommit, r, &resp)
		if err == nil {
			resp.Version = r.Version
			return &resp
		}
		c.warn("cluster mode: handing a transactional offset commit to the transaction coordinator failed", "coordinator", id, "err", err)
	}
	// Retriable: the client finds the coordinators again and retries.
	return denyAll(r, errCoordinatorNotAvailable).(*kmsg.TxnOffsetCommitResponse)
}

// serveTxnOffsetCommit runs a TxnOffsetCommit a consumer group's
// coordinator in another group handed to this transactional id's
// coordinator.
func (c *clusterMode) serveTxnOffsetCommit(w http.ResponseWriter, hr *http.Request) {
	var r kmsg.TxnOffsetCommitRequest
	if !c.readJSON(w, hr, &r) {
		return
	}
	if !c.coordinates(txnCoordinator, r.TransactionalID) {
		writeJSON(w, denyAll(&r, errNotCoordinator))
		return
	}
	ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
	defer cancel()
	writeJSON(w, c.b.txns.TxnOffsetCommit(ctx, &r))
}

// writeRemoteTxnOffsets has the consumer group's coordinator, in the group
// owning its partition of the offsets topic, write a transaction's offset
// commits. It answers a Kafka code; a failed call is
// COORDINATOR_NOT_AVAILABLE, which clients retry.
func (c *clusterMode) writeRemoteTxnOffsets(ctx context.Context, pid int64, epoch int16, r *kmsg.TxnOffsetCommitRequest) int16 {
	id, ok := c.coordinatorLeader(0, r.Group)
	if !ok {
		return kerr.CoordinatorNotAvailable.Code
	}
	var ans txnAnswer
	if err := c.call(ctx, id, PathTxnOffsets, txnOffsetsRequest{ProducerID: pid, ProducerEpoch: epoch, Commit: r}, &ans); err != nil || len(ans.Codes) != 1 {
		c.warn("cluster mode: asking the group coordinator to write transactional offsets failed", "coordinator", id, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return ans.Codes[0]
}

// serveTxnOffsets writes a transaction's offset commits for a consumer
// group this group coordinates, as the transaction coordinator asked.
func (c *clusterMode) serveTxnOffsets(w http.ResponseWriter, hr *http.Request) {
	var req txnOffsetsRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	if req.Commit == nil {
		http.Error(w, "no commit in the request", http.StatusBadRequest)
		return
	}
	code := errNotCoordinator
	if c.coordinates(groupCoordinator, req.Commit.Group) {
		ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
		defer cancel()
		code = c.b.groups.WriteTxnOffsets(ctx, req.ProducerID, req.ProducerEpoch, req.Commit)
	}
	writeJSON(w, txnAnswer{Codes: []int16{code}})
}
