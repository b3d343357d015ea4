package raftgroup

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/auth"
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
	return NewHandlerAt(MessagePath, maxMessageBytes, token, receive)
}

// NewHandlerAt is NewHandler for another Raft log than the group's: it
// serves POST path, refusing messages over maxBytes, as HTTPTransport
// with HTTPConfig.Path sends them.
func NewHandlerAt(path string, maxBytes int, token string, receive func(*pb.Message) bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, int64(maxBytes)+1))
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > maxBytes {
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
	return Authorize(token, mux)
}

// Authorize rejects requests without the bearer token with 401, as every
// endpoint of the replication port does.
func Authorize(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !auth.BearerOK(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="replication"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
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
	// Scheme is "http" (default, or "https" when TLS is set).
	Scheme string
	// TLS, when set, is the client side of the replication port's TLS
	// (Replication.TLS): the CA that verifies the peers and this replica's
	// certificate for peers that require one. It is used when Client is
	// nil and makes Scheme default to "https".
	TLS *tls.Config
	// Path is where messages are POSTed (MessagePath if empty).
	Path string
	// Logger, when set, gets a line when a peer link fails for a TLS
	// reason (a certificate the CA does not sign, a peer that refuses
	// ours, one side without TLS): a misconfiguration that would
	// otherwise only show as a peer that never answers. Other failures
	// stay silent: a dead peer is normal in a failover group.
	Logger *slog.Logger
}

// HTTPTransport sends Raft messages to peers with POST MessagePath (or
// HTTPConfig.Path), one
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
		if cfg.TLS != nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = cfg.TLS.Clone()
			cfg.Client.Transport = tr
		}
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
		if cfg.TLS != nil {
			cfg.Scheme = "https"
		}
	}
	if cfg.Path == "" {
		cfg.Path = MessagePath
	}
	t := &HTTPTransport{cfg: cfg, queues: map[uint64]chan *pb.Message{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for id, addr := range cfg.Peers {
		q := make(chan *pb.Message, cfg.QueueSize)
		t.queues[uint64(id)] = q
		t.wg.Add(1)
		go t.sender(id, fmt.Sprintf("%s://%s%s", cfg.Scheme, addr, cfg.Path), q)
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

// tlsRelog is how often a TLS failure that persists unchanged is logged
// again: once is easy to miss, every heartbeat would flood the log.
const tlsRelog = time.Minute

func (t *HTTPTransport) sender(peer int32, url string, q chan *pb.Message) {
	defer t.wg.Done()
	// The TLS failure last logged for this peer and when: one line when
	// it starts or changes, one when the link works again.
	var logged string
	var loggedAt time.Time
	for {
		select {
		case <-t.ctx.Done():
			return
		case m := <-q:
			err := t.post(url, m)
			if t.cfg.Logger == nil || t.ctx.Err() != nil {
				continue
			}
			why, isTLS := TLSFailure(err)
			switch {
			case isTLS && (why != logged || time.Since(loggedAt) >= tlsRelog):
				t.cfg.Logger.Warn("replication: TLS with a peer failed; every replica needs Replication.TLS with the same CA (ClientCAFile) and a certificate it signed",
					"peer", peer, "url", url, "err", why)
				logged, loggedAt = why, time.Now()
			case err == nil && logged != "":
				t.cfg.Logger.Info("replication: TLS with a peer works again", "peer", peer)
				logged = ""
			}
		}
	}
}

// post delivers one message; failures are dropped (Raft retries) and
// returned for the TLS log.
func (t *HTTPTransport) post(url string, m *pb.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if t.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.cfg.Token)
	}
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte(plainToTLS)) {
		return errPlainToTLS
	}
	return nil
}

// plainToTLS is what Go's HTTPS server answers a plain HTTP request with
// (status 400).
const plainToTLS = "Client sent an HTTP request to an HTTPS server"

// errPlainToTLS is a plain HTTP request answered by a TLS port.
var errPlainToTLS = errors.New("the peer's replication port serves TLS, this replica sent plain HTTP (it has no Replication.TLS)")

// TLSFailure reports whether err, from a request to a peer's replication
// port, failed for a TLS reason, and says which in a sentence. Such
// failures are configuration mistakes worth a log line, unlike refused
// connections and timeouts.
func TLSFailure(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var (
		verr *tls.CertificateVerificationError
		rec  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, errPlainToTLS):
		return err.Error(), true
	case errors.As(err, &verr):
		return "the peer's certificate does not verify against Replication.TLS.ClientCAFile: " + verr.Err.Error(), true
	case errors.As(err, &rec):
		return "the peer's replication port does not speak TLS (it has no Replication.TLS)", true
	}
	// net/http turns a plain HTTP answer to a TLS handshake into an
	// error of its own, and the peer's alert comes as a "remote error":
	// neither has a type to match.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "the peer's replication port does not speak TLS (it has no Replication.TLS)", true
	case strings.Contains(msg, "remote error: tls:"):
		return "the peer refused the handshake (" + msg + "): does it trust another CA, or require a client certificate this replica's CertFile cannot be (clientAuth)?", true
	case strings.Contains(msg, "tls: "):
		return msg, true
	}
	return "", false
}
