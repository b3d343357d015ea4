package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// maxInFlight bounds how many requests of one connection may be decoded
// and waiting for their turn to answer; the reader stops reading beyond it,
// which pushes back on a client that pipelines faster than we answer.
const maxInFlight = 64

// Server accepts Kafka client connections for a Broker.
type Server struct {
	b  *Broker
	ln net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Serve starts accepting connections on ln. It returns at once; Close stops
// the listener and every connection.
func (b *Broker) Serve(ln net.Listener) *Server {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		b.boundPort = a.Port
	}
	// With Server.TLS every connection is TLS; the handshake runs first
	// thing in serveConn.
	ln = b.tlsListener(ln)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{b: b, ln: ln, conns: map[net.Conn]struct{}{}, ctx: ctx, cancel: cancel}
	b.serversMu.Lock()
	if b.servers == nil {
		b.servers = map[*Server]struct{}{}
	}
	b.servers[s] = struct{}{}
	b.serversMu.Unlock()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.acceptLoop() }()
	return s
}

// acceptLogInterval spaces the log lines of a failing accept.
const acceptLogInterval = 10 * time.Second

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func (s *Server) acceptLoop() {
	var lastAcceptLog time.Time
	acceptFailures := 0
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			// Out of descriptors (or another accept error): existing
			// connections and the data path keep going; new clients
			// wait in the listen backlog until a descriptor is free.
			// One line per interval, not one per retry.
			if now := time.Now(); now.Sub(lastAcceptLog) >= acceptLogInterval {
				hint := ""
				if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
					hint = "out of file descriptors: raise the open-file limit (ulimit -n, systemd LimitNOFILE) or lower Server.MaxOpenSegmentFiles"
				}
				s.b.log.Error("accept failed; new connections wait until it succeeds", "err", err, "hint", hint, "failures_unlogged_before", acceptFailures)
				lastAcceptLog, acceptFailures = now, 0
			} else {
				acceptFailures++
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !s.b.admitConn(c) {
			continue
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			s.b.sec.limits.Release(remoteIP(c))
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.b.stats.connections.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			s.b.stats.connections.Add(-1)
			s.b.sec.limits.Release(remoteIP(c))
		}()
	}
}

// Close stops accepting, closes every client connection and waits for
// their goroutines.
func (s *Server) Close() error {
	s.b.serversMu.Lock()
	delete(s.b.servers, s)
	s.b.serversMu.Unlock()
	s.cancel()
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// closeConns closes every client connection (the listener stays open).
func (s *Server) closeConns() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

// closeClients closes every client connection of every listener.
func (b *Broker) closeClients() {
	b.serversMu.Lock()
	defer b.serversMu.Unlock()
	for s := range b.servers {
		s.closeConns()
	}
}

// pending is one request's place in the connection's answer order. done is
// closed when resp (nil for acks=0 produce) is ready.
type pending struct {
	hdr  protocol.Header
	resp kmsg.Response
	done chan struct{}
	// raw, when isRaw, is written as a bare size-prefixed token (the SASL
	// exchange after SaslHandshake v0) instead of resp.
	raw   []byte
	isRaw bool
	// held is the answer's record bytes counted against the broker's
	// answer budget (memory.holdAnswer), given back once written.
	held int64
}

// conn is one client connection. Its reader goroutine (serveConn) decodes
// and dispatches requests in order; its writer goroutine answers them in the
// same order, waiting for slow ones (acks=all, long-poll fetch) without
// stopping the reader.
type conn struct {
	s      *Server
	c      net.Conn
	log    *slog.Logger
	ctx    context.Context
	queue  chan *pending
	client string
	waits  sync.WaitGroup
	// held is what this connection's answers hold of the answer budget;
	// whatever is left when the connection ends is given back then.
	held atomic.Int64
	// unwritten are the answers a failed writer dropped (drain); the
	// writer's until it ends, then serveConn's.
	unwritten []*pending

	// The login state belongs to the reader goroutine. user is set once,
	// before any request that could read it is dispatched.
	user    string
	session auth.Session
	rawSASL bool
	// certSubject is the subject of the client's verified TLS
	// certificate, "" without one.
	certSubject string
	// viaForward marks the stand-in for a client of a follower that
	// forwarded its request here (forward.go): never forwarded again.
	viaForward bool
	deniedLog

	// sums are the chunk CRCs of the produce frame being read and
	// served; the reader goroutine's, and a produce handler's while the
	// reader waits for it.
	sums recordbatch.Sums

	// mutedUntil (broker time, Unix nanoseconds) pauses the reader of a connection
	// over its byte-rate quota; throttled remembers which kinds were
	// logged.
	mutedUntil atomic.Int64
	throttled  [2]atomic.Bool
}

func (s *Server) serveConn(c net.Conn) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	cn := &conn{s: s, c: c, ctx: ctx, queue: make(chan *pending, maxInFlight),
		log: s.b.log.With("peer", c.RemoteAddr().String())}
	subject, err := cn.tlsHandshake()
	if err != nil {
		cn.log.Warn("closed client connection", "reason", err.Error())
		c.Close()
		return
	}
	cn.certSubject = subject
	_, isTLS := c.(*tls.Conn)
	cn.log.Debug("client connected", "tls", isTLS, "client_cert", subject)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		cn.writeLoop()
		// A write error ends the connection: stop the reader too.
		c.Close()
		cancel()
	}()
	reason := cn.readLoop()
	// Nobody will read answers any more: end the waits (long polls,
	// JoinGroup) instead of letting them run out.
	cancel()
	close(cn.queue)
	<-writerDone
	c.Close()
	// Waiting handlers belong to the connection: it does not finish
	// (and Server.Close does not return) until they have.
	cn.waits.Wait()
	for _, p := range cn.unwritten {
		s.b.mem.releaseAnswer(p.resp)
	}
	s.b.mem.responses.Release(cn.held.Swap(0))
	if reason != nil {
		cn.log.Warn("closed client connection", "reason", reason.Error(), "client_id", cn.client, "principal", cn.aclPrincipal())
	} else {
		cn.log.Debug("client disconnected")
	}
}

// readLoop returns why the connection must close, or nil on a clean EOF.
func (cn *conn) readLoop() error {
	br := bufio.NewReaderSize(cn.c, 64<<10)
	b := cn.s.b
	for {
		if !cn.waitMuted() {
			return nil
		}
		if cn.rawSASL {
			if more, err := cn.rawSASLStep(br); !more {
				return err
			}
			continue
		}
		// Idle: wait for the next request's size at most
		// ConnectionsMaxIdleMs; then the rest of the frame must come
		// within RequestReadTimeoutMs.
		if idle := b.cfg.ConnectionsMaxIdleMs; idle > 0 {
			_ = cn.c.SetReadDeadline(time.Now().Add(time.Duration(idle) * time.Millisecond))
		} else {
			_ = cn.c.SetReadDeadline(time.Time{})
		}
		if _, err := br.Peek(4); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("idle for %d ms (Server.ConnectionsMaxIdleMs); clients reconnect when they need to", b.cfg.ConnectionsMaxIdleMs)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || cn.ctx.Err() != nil {
				return nil
			}
			return err
		}
		_ = cn.c.SetReadDeadline(time.Now().Add(time.Duration(b.cfg.RequestReadTimeoutMs) * time.Millisecond))
		limit := b.cfg.MaxRequestBytes
		preLogin := cn.mustLogIn()
		if preLogin {
			limit = min(limit, preAuthMaxFrame)
		}
		n, err := protocol.ReadFrameSize(br, limit)
		if err == nil {
			var frame []byte
			var pooled bool
			frame, pooled, err = cn.readBody(br, n)
			if err == nil {
				err = cn.serveFrame(frame)
				cn.sums.Reset(nil)
				if pooled {
					b.mem.frames.Put(frame)
				}
				b.mem.requests.Release(int64(n))
				if err == nil {
					continue
				}
				if errors.Is(err, errConnDone) {
					return nil
				}
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || cn.ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("connection closed in the middle of a frame")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.stats.badFrames.Add(1)
			return fmt.Errorf("a request's bytes did not arrive within %d ms of its size (Server.RequestReadTimeoutMs)", b.cfg.RequestReadTimeoutMs)
		}
		b.stats.badFrames.Add(1)
		if preLogin && errors.Is(err, protocol.ErrFrameTooLarge) {
			return fmt.Errorf("%w before SASL login (until a client logs in, frames are capped at %d bytes)", err, preAuthMaxFrame)
		}
		return err
	}
}

// errConnDone ends a connection without a reason to log: it is closing.
var errConnDone = errors.New("connection closing")

// A produce frame of summedFrameBytes or more is read summedReadBytes at
// a time, each read summed while the CPU's caches hold it: small enough
// to stay in a core's 1 MiB L2 here, large enough that the extra reads
// cost far less than reading the records again from memory.
const (
	summedFrameBytes = 4 * recordbatch.SumChunk
	summedReadBytes  = 256 << 10
)

// readBody takes a frame's n bytes from the request budget, waiting while
// it is spent (the connection is not read meanwhile), and reads the body.
// On success the caller gives the n bytes back once the frame is handled,
// and the frame to the pool when pooled; on error readBody has given both
// back.
func (cn *conn) readBody(br *bufio.Reader, n int) (frame []byte, pooled bool, err error) {
	b := cn.s.b
	if _, err := b.mem.requests.Acquire(cn.ctx, int64(n)); err != nil {
		return nil, false, errConnDone
	}
	// The wait for memory is the broker's, not the client's: the body's
	// time starts now.
	_ = cn.c.SetReadDeadline(time.Now().Add(time.Duration(b.cfg.RequestReadTimeoutMs) * time.Millisecond))
	var buf []byte
	if n >= 2 {
		// A produce's handler copies its records to the log and keeps
		// no slice of the frame (its wait uses only offsets and
		// lengths), so the frame goes back to the pool as soon as it is
		// handled: a fresh megabyte per produce costs its zeroing, page
		// faults and, once the runtime returns it, TLB shootdowns
		// (docs/BENCHMARKS.md). Other requests' decoded fields may
		// point into their frame for as long as the broker keeps them,
		// so those frames are the garbage collector's.
		if key, err := br.Peek(2); err == nil && int16(binary.BigEndian.Uint16(key)) == int16(kmsg.Produce) {
			buf = b.mem.frameBuffer(n)
		}
	}
	if buf != nil && n >= summedFrameBytes && n <= cap(buf) {
		// Summed as it arrives, so the produce's CRC checks need not
		// read the records again (recordbatch.Sums).
		frame = buf[:n]
		cn.sums.Reset(frame)
		err = protocol.ReadFrameBodyInSteps(br, frame, summedReadBytes, cn.sums.Fill)
	} else {
		frame, err = protocol.ReadFrameBody(br, n, buf)
	}
	if err != nil {
		cn.sums.Reset(nil)
		if buf != nil {
			b.mem.frames.Put(buf)
		}
		b.mem.requests.Release(int64(n))
		return nil, false, err
	}
	return frame, buf != nil, nil
}

// serveFrame parses and dispatches one frame. It returns why the
// connection must close: errConnDone for a closing connection, any other
// error to be logged.
func (cn *conn) serveFrame(frame []byte) error {
	b := cn.s.b
	req, err := protocol.ParseRequest(frame, versions)
	if errors.Is(err, protocol.ErrApiVersionsTooNew) {
		b.stats.request(req.Key, 35)
		p := &pending{hdr: req.Header, resp: protocol.ApiVersionsTooNew(versions), done: make(chan struct{})}
		close(p.done)
		if !cn.enqueue(p) {
			return errConnDone
		}
		return nil
	}
	if err != nil {
		b.stats.badFrames.Add(1)
		return err
	}
	if req.ClientID != nil && cn.client == "" {
		cn.client = *req.ClientID
	}
	// Asked again: the first user may have been created while the
	// reader waited for this frame.
	if !allowedBeforeLogin(req.Key) && cn.mustLogIn() {
		return fmt.Errorf("%s request before SASL login: users are configured, so a client may send only ApiVersions, SaslHandshake and SaslAuthenticate until it logs in (configure the client's SASL mechanism, username and password)", kmsg.NameForKey(req.Key))
	}
	if saslKey(req.Key) {
		return cn.handleSASL(req)
	}
	p := &pending{hdr: req.Header, done: make(chan struct{})}
	if !cn.enqueue(p) {
		return errConnDone
	}
	cn.dispatch(req, p)
	return nil
}

// host is the client's IP, for DescribeGroups.
func (cn *conn) host() string {
	if a, ok := cn.c.RemoteAddr().(*net.TCPAddr); ok {
		return "/" + a.IP.String()
	}
	return cn.c.RemoteAddr().String()
}

func (cn *conn) enqueue(p *pending) bool {
	select {
	case cn.queue <- p:
		return true
	case <-cn.ctx.Done():
		return false
	}
}

// dispatch runs the handler. A handler that must wait returns a function
// that finishes the response; it runs on its own goroutine so the reader
// can go on decoding pipelined requests.
func (cn *conn) dispatch(req protocol.Request, p *pending) {
	start := time.Now()
	resp, wait := cn.s.b.handle(cn, req)
	finish := func(resp kmsg.Response) {
		cn.throttle(req.Body, resp)
		p.held = cn.s.b.mem.holdAnswer(resp)
		cn.held.Add(p.held)
		p.resp = resp
		cn.s.b.stats.finished(req.Key, resp, time.Since(start))
		close(p.done)
	}
	if wait == nil {
		finish(resp)
		return
	}
	cn.waits.Add(1)
	go func() {
		defer cn.waits.Done()
		waitStart := time.Now()
		resp := wait(cn.ctx)
		cn.s.b.stats.waited(req.Key, time.Since(waitStart))
		finish(resp)
	}()
}

func (cn *conn) writeLoop() {
	bw := bufio.NewWriterSize(cn.c, 64<<10)
	var buf []byte
	for p := range cn.queue {
		select {
		case <-p.done:
		default:
			// Flush what is ready before blocking on a slow answer.
			if err := bw.Flush(); err != nil {
				cn.drain(p)
				return
			}
			select {
			case <-p.done:
			case <-cn.ctx.Done():
				cn.drain(p)
				return
			}
		}
		if p.isRaw {
			buf = binary.BigEndian.AppendUint32(buf[:0], uint32(len(p.raw)))
			buf = append(buf, p.raw...)
			if _, err := bw.Write(buf); err != nil {
				cn.drain(nil)
				return
			}
			if err := bw.Flush(); err != nil {
				cn.drain(nil)
				return
			}
			continue
		}
		if p.resp == nil {
			continue // acks=0 produce: no answer at all
		}
		if p.resp == acks0Failed {
			bw.Flush()
			cn.log.Warn("closing the connection: an acks=0 produce failed", "client_id", cn.client)
			cn.drain(nil)
			return
		}
		out := buf[:0]
		var pooled []byte
		if p.held > 0 {
			// Sized once: growing by appends would copy a multi-MB
			// fetch answer several times over. The memory is the
			// pool's, shared by every connection, so an idle consumer
			// does not keep its last answer's buffer. What goes back
			// is the buffer lent, not out: an answer larger than
			// estimated grows out onto the heap.
			pooled = cn.s.b.mem.frames.Get(int(p.held) + 64<<10)
			out = pooled[:0]
		}
		out = protocol.AppendResponse(out, p.hdr, p.resp)
		_, err := bw.Write(out)
		if p.held > 0 {
			cn.s.b.mem.releaseAnswer(p.resp)
		}
		p.resp = nil
		if p.held > 0 {
			cn.s.b.mem.frames.Put(pooled)
			cn.s.b.mem.responses.Release(p.held)
			cn.held.Add(-p.held)
		} else if cap(out) <= 64<<10 {
			buf = out
		}
		if err != nil {
			cn.drain(nil)
			return
		}
		if len(cn.queue) == 0 {
			if err := bw.Flush(); err != nil {
				cn.drain(nil)
				return
			}
		}
	}
	bw.Flush()
}

// drain empties the queue after a write failure so the reader never blocks
// on a full queue for a connection that is going away. The answers it
// drops, and current when the writer had not written it, are kept in
// unwritten: serveConn gives back the memory they hold once every handler
// has finished.
func (cn *conn) drain(current *pending) {
	cn.c.Close()
	if current != nil {
		cn.unwritten = append(cn.unwritten, current)
	}
	for p := range cn.queue {
		cn.unwritten = append(cn.unwritten, p)
	}
}

// recordBytes is the size of the record data a response carries.
func recordBytes(resp kmsg.Response) int {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	n := 0
	for i := range f.Topics {
		for j := range f.Topics[i].Partitions {
			n += len(f.Topics[i].Partitions[j].RecordBatches)
		}
	}
	return n
}

// remoteIP is a connection's peer address without the port.
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// admitConn applies the connection limits to a new connection: it returns
// false (after closing and logging it) when the connection is refused.
func (b *Broker) admitConn(c net.Conn) bool {
	ip := remoteIP(c)
	l := &b.sec.limits
	limit := l.Admit(ip)
	if limit == "" {
		return true
	}
	c.Close()
	if ok, suppressed := l.LogRefusal(time.Now()); ok {
		b.log.Warn("refused client connection", "peer", c.RemoteAddr().String(), "limit", limit,
			"max_connections", l.Max, "max_connections_per_ip", l.PerIP, "refused_unlogged_before", suppressed)
	}
	return false
}
