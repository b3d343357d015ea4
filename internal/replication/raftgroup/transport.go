package raftgroup

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MessagePath is where a peer POSTs one Raft message (protobuf bytes of a
// raftpb.Message, Content-Type application/x-protobuf).
const MessagePath = "/replication/raft/message"

// maxMessageBytes bounds a received message; the group's snapshots and
// entries are tiny.
const maxMessageBytes = 8 << 20

// Handler serves /replication/raft/* for this Node: the broker mounts it on
// its replication HTTP server (mux.Handle("/replication/raft/",
// node.Handler())). Every request must carry "Authorization: Bearer
// <Token>" when a token is configured, else it gets 401.
func (n *Node) Handler() http.Handler {
	return NewHandler(n.cfg.Token, n.Receive)
}

// NewHandler returns the /replication/raft/* handler that checks token and
// passes each decoded message to receive.
func NewHandler(token string, receive func(*pb.Message) bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+MessagePath, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxMessageBytes+1))
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > maxMessageBytes {
			http.Error(w, "message too large", http.StatusRequestEntityTooLarge)
			return
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(b, m); err != nil {
			http.Error(w, "bad message: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !receive(m) {
			// Dropped: the sender need not retry, Raft resends.
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return authorize(token, mux)
}

// authorize rejects requests without the bearer token with 401.
func authorize(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="replication"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// HTTPConfig configures an HTTPTransport.
type HTTPConfig struct {
	// Peers maps each other member's id to its replication address
	// (host:port).
	Peers map[int32]string
	// Token is the shared replication token.
	Token string
	// Client sends the requests (a client with Timeout if nil).
	Client *http.Client
	// Timeout bounds one request (default 2s).
	Timeout time.Duration
	// QueueSize bounds each peer's queue; a full queue drops (default 128).
	QueueSize int
	// Scheme is "http" (default) or "https".
	Scheme string
}

// HTTPTransport sends Raft messages to peers with POST MessagePath, one
// goroutine and one bounded queue per peer, so a slow or dead peer delays
// no other and never blocks Raft.
type HTTPTransport struct {
	cfg    HTTPConfig
	queues map[uint64]chan *pb.Message
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewHTTPTransport starts the per-peer senders; Close stops them.
func NewHTTPTransport(cfg HTTPConfig) *HTTPTransport {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 128
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	t := &HTTPTransport{cfg: cfg, queues: map[uint64]chan *pb.Message{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for id, addr := range cfg.Peers {
		q := make(chan *pb.Message, cfg.QueueSize)
		t.queues[uint64(id)] = q
		t.wg.Add(1)
		go t.sender(fmt.Sprintf("%s://%s%s", cfg.Scheme, addr, MessagePath), q)
	}
	return t
}

// Send implements Transport: it queues m for its peer, or drops it.
func (t *HTTPTransport) Send(m *pb.Message) bool {
	q, ok := t.queues[m.GetTo()]
	if !ok || t.ctx.Err() != nil {
		return false
	}
	select {
	case q <- m:
		return true
	default:
		return false
	}
}

// Close stops the senders; queued messages are dropped.
func (t *HTTPTransport) Close() {
	t.cancel()
	t.wg.Wait()
}

func (t *HTTPTransport) sender(url string, q chan *pb.Message) {
	defer t.wg.Done()
	for {
		select {
		case <-t.ctx.Done():
			return
		case m := <-q:
			t.post(url, m)
		}
	}
}

// post delivers one message; failures are dropped (Raft retries).
func (t *HTTPTransport) post(url string, m *pb.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if t.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.cfg.Token)
	}
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
}
