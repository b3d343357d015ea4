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

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/txncoord"
)

// Transactions across groups in cluster mode. The transaction coordinator
// lives in one group (the owner of __transaction_state); a transaction may
// hold partitions of any group. Between groups, over the replication port
// and its Token, as JSON:
//
//   - PathTxnCheck: a partition leader in another group asks the
//     coordinator whether a producer's transaction is ongoing and holds
//     the partition, before the producer's first transactional batch on
//     it (KIP-890's verification), or asks it to add the partition
//     (Produce v12, transactions v2).
//   - PathTxnMarkers: the coordinator has the owner group's leader write
//     commit or abort markers (Kafka's WriteTxnMarkers), retried until
//     each is durable there.
//
// A transaction with a partition in another group writes its decision
// durably before any marker (txncoord's end), so a coordinator that fails
// over finds the decision in its own log and finishes it.

// Paths of the cross-group transaction calls.
const (
	PathTxnCheck   = "/cluster/txn/check"
	PathTxnMarkers = "/cluster/txn/markers"
)

// txnCheckRequest asks the coordinator about one producer's partitions.
type txnCheckRequest struct {
	ProducerID    int64    `json:"producerId"`
	ProducerEpoch int16    `json:"producerEpoch"`
	Partitions    []txn.TP `json:"partitions"`
	// Add adds the partitions (Produce v12) instead of only checking.
	Add bool `json:"add,omitempty"`
}

// txnMarkersRequest asks a group's leader to write markers.
type txnMarkersRequest struct {
	ProducerID    int64    `json:"producerId"`
	ProducerEpoch int16    `json:"producerEpoch"`
	Commit        bool     `json:"commit"`
	Partitions    []txn.TP `json:"partitions"`
}

// txnAnswer is the Kafka error code of each partition, in request order
// (for a check: one code for all).
type txnAnswer struct {
	Codes []int16 `json:"codes"`
}

// remoteTxnCoordinator reports whether the transaction coordinator is in
// another group, so that this group's partitions check producers with it.
func (b *Broker) remoteTxnCoordinator() bool {
	return b.cl != nil && !b.cl.coordinates(txnCoordinator)
}

// remoteTxnCheck asks the coordinator's group about a producer's
// transaction on tps (or adds them). It answers a Kafka code; a failed
// call is COORDINATOR_NOT_AVAILABLE, which producers retry.
func (c *clusterMode) remoteTxnCheck(ctx context.Context, pid int64, epoch int16, tps []txn.TP, add bool) int16 {
	id, ok := c.coordinatorLeader(1)
	if !ok {
		return kerr.CoordinatorNotAvailable.Code
	}
	var ans txnAnswer
	if err := c.call(ctx, id, PathTxnCheck, txnCheckRequest{ProducerID: pid, ProducerEpoch: epoch, Partitions: tps, Add: add}, &ans); err != nil || len(ans.Codes) != 1 {
		c.warn("cluster mode: asking the transaction coordinator failed", "coordinator", id, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return ans.Codes[0]
}

// writeRemoteMarkers has each owner group's leader write the marker to its
// partitions among tps, retrying (a new leader, a group not yet created
// the topic) until every one is durable or ctx ends.
func (c *clusterMode) writeRemoteMarkers(ctx context.Context, pid int64, epoch int16, commit bool, tps []txn.TP) error {
	left := slices.Clone(tps)
	var lastErr error
	for {
		byLeader := map[int32][]txn.TP{}
		for _, tp := range left {
			h, foreign := c.foreign(tp.Topic, tp.Partition)
			if !foreign {
				// Deleted, or no longer another group's (a move is
				// not built): nothing to mark here.
				continue
			}
			byLeader[h.leader] = append(byLeader[h.leader], tp)
		}
		left = left[:0]
		for leader, part := range byLeader {
			var ans txnAnswer
			err := c.call(ctx, leader, PathTxnMarkers, txnMarkersRequest{ProducerID: pid, ProducerEpoch: epoch, Commit: commit, Partitions: part}, &ans)
			if err == nil && len(ans.Codes) != len(part) {
				err = fmt.Errorf("broker %d answered %d codes for %d partitions", leader, len(ans.Codes), len(part))
			}
			if err != nil {
				lastErr = err
				left = append(left, part...)
				continue
			}
			for i, code := range ans.Codes {
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
	case !c.coordinates(txnCoordinator):
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
	batch0, err := txncoord.MarkerBatch(req.ProducerID, req.ProducerEpoch, req.Commit, b.clock.Now().UnixMilli())
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
		end, err := b.appendInternal(p, slices.Clone(batch0), partition.FlushNow)
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
	for _, pw := range waits {
		if err := b.waitOwn(ctx, pw.p, pw.end); err != nil {
			codes[pw.i] = coordinatorCode(err)
			if errors.Is(err, errStoppedLeading) {
				codes[pw.i] = errNotLeaderOrFollower
			}
		}
	}
	writeJSON(w, txnAnswer{Codes: codes})
}
