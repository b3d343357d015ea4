package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
)

// Forwarding: a follower answers the requests that need the leader's
// state but are not tied to partition leadership by sending them to the
// leader and relaying its answer (as Kafka brokers forward admin requests
// to the controller, KIP-590). Clients send these to "any broker" or "the
// least loaded node", so without forwarding a follower in the bootstrap
// list (a Kubernetes Service in front of the replicas) stalls them: an
// idempotent librdkafka producer asked the same follower for a producer id
// forever.
//
// The request travels over the replication port (its Token and TLS) as
// the body bytes the client sent, re-encoded at the client's version,
// with the client's principal and address beside it; the leader
// authorizes it as that client and runs its ordinary handler. Without a
// Token or mutual TLS the link proves nothing about who is calling, so
// the leader then treats every forwarded request as User:ANONYMOUS and a
// follower forwards only anonymous clients' requests.
//
// Requests tied to partition leadership (Produce, Fetch, ListOffsets,
// OffsetForLeaderEpoch, DeleteRecords, DescribeProducers) are never
// forwarded: clients route those by leader themselves, and the data path
// is never proxied. Coordinator requests are answered NOT_COORDINATOR
// (each API's onFollower) because FindCoordinator sends clients to the leader.

// PathForward is the leader's endpoint for forwarded client requests.
const PathForward = "/replication/forward"

// Headers of a forwarded request.
const (
	fwdKey       = "X-Moonmq-Api-Key"
	fwdVersion   = "X-Moonmq-Api-Version"
	fwdPrincipal = "X-Moonmq-Principal"
	fwdClientID  = "X-Moonmq-Client-Id"
	fwdPeer      = "X-Moonmq-Client-Address"
)

// forwardTimeout bounds a forwarded request, the leader's work included;
// it is below every client's request timeout (30 s and more), so the
// client gets the retriable answer rather than a timeout of its own.
const forwardTimeout = 10 * time.Second

// maxForwardBytes bounds a forwarded request or answer: these are admin
// requests, far smaller.
const maxForwardBytes = 16 << 20

// linkAuthenticated reports whether the replication port proves its
// callers are replicas: a Token, or TLS that requires a client
// certificate signed by the group's CA.
func (r *replica) linkAuthenticated() bool {
	return r.cfg.Token != "" || r.tls != nil && r.tls.Server.ClientAuth == tls.RequireAndVerifyClientCert
}

// authorized checks a request to the replication port for its bearer
// token (auth.BearerOK, as log shipping and Raft check theirs) and
// answers 401 when it lacks it.
func (r *replica) authorized(w http.ResponseWriter, req *http.Request) bool {
	if auth.BearerOK(req, r.cfg.Token) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="replication"`)
	http.Error(w, "unauthorized", http.StatusUnauthorized)
	return false
}

// errNoLeader is a forward with no serving leader to go to (or that may
// not go to it): the client is sent to the controller.
var errNoLeader = errors.New("cannot forward to a serving leader")

// forward sends req to the leader and returns its answer; when that
// fails it answers what clients retry: the error Kafka gives when the
// controller (or coordinator) is away.
func (b *Broker) forward(ctx context.Context, cn *conn, req protocol.Request) kmsg.Response {
	principal := cn.aclPrincipal()
	r := b.repl
	var resp kmsg.Response
	var err error
	if !r.linkAuthenticated() && principal != anonymousPrincipal {
		// NOT_CONTROLLER: the client goes to the controller (the
		// leader, in Metadata) itself.
		err = fmt.Errorf("%w: the replication port has no Token or mutual TLS, so the leader could not trust the client's identity (set Replication.Token)", errNoLeader)
	} else {
		resp, err = r.forwardToLeader(ctx, cn, req, principal)
	}
	if err == nil {
		return resp
	}
	r.fwdFailed.Add(1)
	cn.log.Warn("forwarding a request to the leader failed; answering with a retriable error",
		"api", kmsg.NameForKey(req.Key), "leader", r.leaderID(), "err", err)
	code := errRequestTimedOut
	if errors.Is(err, errNoLeader) {
		code = errNotController
	}
	a := apis[req.Key]
	switch {
	case a.onFollower == nil:
		// Reads of replicated state: this replica's copy, at most one
		// replication round old, is a better answer than an error (for
		// Metadata: the topic is "not available yet", and the client
		// asks again).
		resp, wait, handled := b.authorizeRequest(cn, a, req)
		if !handled {
			resp, wait = a.serve(b, cn, req)
		}
		if wait != nil {
			return wait(ctx)
		}
		return resp
	case a.forwardFail != nil:
		return a.forwardFail(b, req.Body, code)
	}
	out := req.Body.ResponseKind()
	mirror(reflect.ValueOf(req.Body).Elem(), reflect.ValueOf(out).Elem(), code)
	return out
}

// forwardToLeader is one forwarding round trip.
func (r *replica) forwardToLeader(ctx context.Context, cn *conn, req protocol.Request, principal string) (kmsg.Response, error) {
	id := r.leaderID()
	addr, ok := r.peerAddress(id)
	if id < 0 || id == r.self || !ok {
		return nil, errNoLeader
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	body := req.Body.AppendTo(nil)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.tls.Scheme()+"://"+addr+PathForward, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set(fwdKey, strconv.Itoa(int(req.Key)))
	hr.Header.Set(fwdVersion, strconv.Itoa(int(req.Version)))
	hr.Header.Set(fwdPrincipal, principal)
	hr.Header.Set(fwdPeer, cn.c.RemoteAddr().String())
	if req.ClientID != nil {
		hr.Header.Set(fwdClientID, *req.ClientID)
	}
	if r.cfg.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	hresp, err := r.fwdClient().Do(hr)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxForwardBytes+1))
	if err != nil {
		return nil, err
	}
	switch {
	case hresp.StatusCode == http.StatusServiceUnavailable:
		return nil, fmt.Errorf("%w: replica %d answered %s", errNoLeader, id, strings.TrimSpace(string(data)))
	case hresp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("replica %d answered %s: %s", id, hresp.Status, strings.TrimSpace(string(data)))
	case len(data) > maxForwardBytes:
		return nil, fmt.Errorf("replica %d's answer is over %d bytes", id, maxForwardBytes)
	}
	resp := req.Body.ResponseKind()
	resp.SetVersion(req.Version)
	if err := resp.ReadFrom(data); err != nil {
		return nil, fmt.Errorf("decode replica %d's answer: %w", id, err)
	}
	r.fwdDone.Add(1)
	return resp, nil
}

// fwdClient is the HTTP client for forwarding, made once.
func (r *replica) fwdClient() *http.Client {
	r.fwdOnce.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if tc := r.tls.ClientConfig(); tc != nil {
			tr.TLSClientConfig = tc.Clone()
		}
		r.fwdHTTP = &http.Client{Transport: tr}
	})
	return r.fwdHTTP
}

// serveForward runs a request a follower forwarded, as the client that
// sent it, and answers the response body.
func (r *replica) serveForward(w http.ResponseWriter, hr *http.Request) {
	if !r.authorized(w, hr) {
		return
	}
	if hr.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if !r.role.serving() {
		http.Error(w, "this replica is not the serving leader", http.StatusServiceUnavailable)
		return
	}
	key, err1 := strconv.Atoi(hr.Header.Get(fwdKey))
	version, err2 := strconv.Atoi(hr.Header.Get(fwdVersion))
	vr, known := versions[int16(key)]
	if err1 != nil || err2 != nil || !known || int16(version) < vr.Min || int16(version) > vr.Max {
		http.Error(w, "bad API key or version", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, maxForwardBytes+1))
	if err != nil || len(body) > maxForwardBytes {
		http.Error(w, "request body unreadable or too large", http.StatusBadRequest)
		return
	}
	kreq := kmsg.RequestForKey(int16(key))
	kreq.SetVersion(int16(version))
	if a := apis[kreq.Key()]; kreq.ReadFrom(body) != nil || a.forwardable == nil || !a.forwardable(r.b, kreq) {
		http.Error(w, "not a forwardable request", http.StatusBadRequest)
		return
	}
	principal := hr.Header.Get(fwdPrincipal)
	if !r.linkAuthenticated() || !strings.HasPrefix(principal, "User:") {
		principal = anonymousPrincipal // nothing vouches for the name
	}
	hdr := protocol.Header{Key: int16(key), Version: int16(version)}
	if id := hr.Header.Get(fwdClientID); id != "" {
		hdr.ClientID = &id
	}
	ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
	defer cancel()
	cn := r.b.forwardedConn(ctx, principal, hr.Header.Get(fwdPeer), hdr.ClientID)
	resp, wait := r.b.handle(cn, protocol.Request{Header: hdr, Body: kreq})
	if wait != nil {
		resp = wait(ctx)
	}
	if resp == nil {
		http.Error(w, "no answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(resp.AppendTo(nil))
}

// anonymousPrincipal is the principal of a client that did not
// authenticate.
const anonymousPrincipal = "User:ANONYMOUS"

// forwardedConn stands in for the client's connection on the leader: the
// handlers and the authorizer read the principal, the client's address
// and its log from it.
func (b *Broker) forwardedConn(ctx context.Context, principal, peer string, clientID *string) *conn {
	cn := &conn{c: addrConn{addr: parseAddr(peer)}, ctx: ctx, viaForward: true,
		log: b.log.With("peer", peer, "forwarded", true)}
	if user := strings.TrimPrefix(principal, "User:"); principal != anonymousPrincipal {
		cn.user = user
	}
	if clientID != nil {
		cn.client = *clientID
	}
	return cn
}

// parseAddr reads "host:port" as a TCP address (the zero address when it
// is not one).
func parseAddr(s string) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", s); err == nil {
		return a
	}
	return &net.TCPAddr{}
}

// addrConn is a net.Conn that only has a remote address: a forwarded
// request's handlers never read or write the client's socket.
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }
