package metanode

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/replication/raftgroup"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// The endpoints a voter serves on the replication port, under
// HandlerPrefix.
const (
	HandlerPrefix = "/cluster/raft/"
	// RaftPath takes one Raft message from another voter.
	RaftPath = HandlerPrefix + "message"
	// ProposePath takes a forwarded Command (JSON) and answers its
	// outcome.
	ProposePath = HandlerPrefix + "propose"
	// LogPath answers an observer's pull: the committed entries after
	// ?after=, or the snapshot when they are compacted away, waiting up
	// to ?waitMs= for something new.
	LogPath = HandlerPrefix + "log"
)

const (
	// maxMessageBytes bounds a Raft message: a snapshot of the whole
	// metadata image travels in one.
	maxMessageBytes = 256 << 20
	// maxCommandBytes bounds a forwarded command.
	maxCommandBytes = 4 << 20
	// maxPullBytes bounds the entries of one pull answer.
	maxPullBytes = 4 << 20
	// maxPullWait bounds the wait a pull may ask for.
	maxPullWait = 30 * time.Second
)

// Handler serves HandlerPrefix for this node: the broker mounts it on its
// replication port (mux.Handle(metanode.HandlerPrefix, node.Handler())).
// Only a voter serves anything; every request must carry the bearer
// token when one is configured.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	if n.voter {
		mux.Handle("POST "+RaftPath, raftgroup.NewHandlerAt(RaftPath, maxMessageBytes, "", n.raft.receive))
		mux.HandleFunc("POST "+ProposePath, n.serveProposal)
		mux.HandleFunc("GET "+LogPath, n.serveLog)
	}
	return raftgroup.Authorize(n.cfg.Token, mux)
}

// proposeAnswer is the JSON answer to a forwarded command.
type proposeAnswer struct {
	Index   uint64          `json:"index,omitempty"`
	Records json.RawMessage `json:"records,omitempty"`
	// Code and Message are a refusal (*meta.Error).
	Code    int16  `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// NotLeader: this voter is not the leader; Leader is the one it knows.
	NotLeader bool  `json:"notLeader,omitempty"`
	Leader    int32 `json:"leader"`
	// Retry: not proposed, try again. Unknown: proposed, outcome unknown.
	Retry   bool `json:"retry,omitempty"`
	Unknown bool `json:"unknown,omitempty"`
}

func (n *Node) serveProposal(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxCommandBytes+1))
	if err != nil || len(b) > maxCommandBytes {
		http.Error(w, "bad or oversized command", http.StatusBadRequest)
		return
	}
	var cmd Command
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		http.Error(w, "bad command: "+err.Error(), http.StatusBadRequest)
		return
	}
	var a proposeAnswer
	res, err := n.raft.submit(r.Context(), cmd)
	var nl *notLeaderError
	var me *meta.Error
	switch {
	case err == nil:
		a.Index = res.Index
		if a.Records, err = meta.EncodeBatch(res.Records); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case errors.As(err, &nl):
		a.NotLeader, a.Leader = true, nl.leader
	case errors.As(err, &me):
		a.Code, a.Message = me.Code.Code, me.Msg
	case errors.Is(err, errNotProposed) || errors.Is(err, ErrStopped):
		a.Retry = true
	default:
		a.Unknown = true
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}

// forward sends cmd to voter id and reads its answer.
func (n *Node) forward(ctx context.Context, id int32, cmd Command) (Result, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return Result{}, err
	}
	var a proposeAnswer
	err = n.call(ctx, id, http.MethodPost, ProposePath, nil, body, &a)
	switch {
	case errors.Is(err, errUnreached):
		return Result{}, errNotProposed
	case err != nil:
		return Result{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case a.NotLeader:
		return Result{}, &notLeaderError{leader: a.Leader}
	case a.Retry:
		return Result{}, errNotProposed
	case a.Unknown:
		return Result{}, ErrOutcomeUnknown
	case a.Code != 0:
		code, ok := kerr.ErrorForCode(a.Code).(*kerr.Error)
		if !ok {
			code = kerr.UnknownServerError
		}
		return Result{}, &meta.Error{Code: code, Msg: a.Message}
	}
	recs, err := meta.DecodeBatch(a.Records)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
	return Result{Index: a.Index, Records: recs}, nil
}

// pullAnswer is the JSON answer to an observer's pull.
type pullAnswer struct {
	// Leader is the metadata leader the voter knows of.
	Leader int32 `json:"leader"`
	// Snapshot, when set, replaces the observer's copy; Entries follow it
	// (or the observer's own index) without a gap.
	Snapshot *pullSnapshot `json:"snapshot,omitempty"`
	Entries  []pullEntry   `json:"entries,omitempty"`
}

type pullSnapshot struct {
	Index uint64          `json:"index"`
	State json.RawMessage `json:"state"`
}

type pullEntry struct {
	Index uint64 `json:"index"`
	// Data is the entry's batch; empty for Raft's own entries.
	Data []byte `json:"data,omitempty"`
}

func (n *Node) serveLog(w http.ResponseWriter, r *http.Request) {
	after, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	if err != nil {
		http.Error(w, "bad after", http.StatusBadRequest)
		return
	}
	waitMs, _ := strconv.ParseInt(r.URL.Query().Get("waitMs"), 10, 64)
	ctx, cancel := context.WithTimeout(r.Context(), min(time.Duration(waitMs)*time.Millisecond, maxPullWait))
	defer cancel()
	for {
		n.mu.RLock()
		applied, ch := n.applied, n.changed
		n.mu.RUnlock()
		if applied > after || ctx.Err() != nil {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
		case <-n.done:
			http.Error(w, "stopped", http.StatusServiceUnavailable)
			return
		}
	}
	a := pullAnswer{Leader: n.Leader()}
	n.mu.RLock()
	applied := n.applied
	n.mu.RUnlock()
	if applied > after {
		if err := n.raft.committedAfter(after, applied, &a); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}

// committedAfter fills a with the applied entries after index after, up
// to applied, or with the snapshot when they have been compacted away.
// MemoryStorage is safe for use beside the Raft loop, and applied
// entries are never rewritten.
func (r *raftLoop) committedAfter(after, applied uint64, a *pullAnswer) error {
	first, err := r.ms.FirstIndex()
	if err != nil {
		return err
	}
	if after+1 >= first {
		ents, err := r.ms.Entries(after+1, applied+1, maxPullBytes)
		if err == nil {
			for _, e := range ents {
				pe := pullEntry{Index: e.GetIndex()}
				if e.GetType() == pb.EntryNormal {
					pe.Data = e.GetData()
				}
				a.Entries = append(a.Entries, pe)
			}
			return nil
		}
		if !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	snap, err := r.ms.Snapshot()
	if err != nil {
		return err
	}
	a.Snapshot = &pullSnapshot{Index: snap.GetMetadata().GetIndex(), State: snap.GetData()}
	return nil
}

// pull asks voter id for what follows after.
func (n *Node) pull(ctx context.Context, id int32, after uint64, wait time.Duration) (pullAnswer, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "waitMs": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var a pullAnswer
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	err := n.call(ctx, id, http.MethodGet, LogPath, q, nil, &a)
	return a, err
}

// errUnreached is a request that never reached the peer: the connection
// could not be made, so the peer did nothing.
var errUnreached = errors.New("metanode: peer unreachable")

// call sends one request to voter id and decodes its JSON answer into v.
func (n *Node) call(ctx context.Context, id int32, method, path string, q url.Values, body []byte, v any) error {
	addr, ok := n.cfg.Voters[id]
	if !ok {
		return fmt.Errorf("%w: %d is not a metadata voter", errUnreached, id)
	}
	u := url.URL{Scheme: n.scheme, Host: addr, Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if n.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+n.cfg.Token)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w: %v", errUnreached, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusServiceUnavailable {
			// Not (or no longer) a voter's node behind that address: it
			// did nothing with the request.
			return fmt.Errorf("%w: voter %d answered %s: %s", errUnreached, id, resp.Status, bytes.TrimSpace(msg))
		}
		return fmt.Errorf("metanode: voter %d answered %s: %s", id, resp.Status, bytes.TrimSpace(msg))
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxMessageBytes)).Decode(v)
}

// newClient is the client for forwarding and pulling, with the
// replication port's TLS when set. Requests are bounded by their
// contexts: a pull waits on purpose.
func newClient(cfg *tls.Config) (*http.Client, string) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	scheme := "http"
	if cfg != nil {
		tr.TLSClientConfig = cfg.Clone()
		scheme = "https"
	}
	return &http.Client{Transport: tr}, scheme
}
