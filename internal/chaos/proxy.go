package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards every TCP connection made to its address to a target
// address, and lets the harness hold, slow down or cut what flows.
//
// A blackholed direction is held, not discarded: the proxy stops
// forwarding (and, once its buffer is full, reading), as a network that
// drops every packet while TCP retransmits. When the direction opens again
// the held bytes flow on, unless the harness ends the connections first
// (Drop or Reset), which is what a partition longer than TCP's patience
// looks like. New connections made while the client-to-server direction is
// held wait to be dialled, as a SYN that gets no answer.
type Proxy struct {
	name string
	ln   net.Listener

	mu      sync.Mutex
	target  string
	holdUp  bool // client to server held
	holdDn  bool // server to client held
	delay   time.Duration
	changed chan struct{} // closed and replaced on every change of the above
	conns   map[*proxyConn]struct{}
	closed  bool

	wg sync.WaitGroup
}

type proxyConn struct {
	client net.Conn
	mu     sync.Mutex
	server net.Conn
	done   chan struct{}
	once   sync.Once
}

// kill ends both sides of the connection; with reset the peers get a TCP
// RST instead of a FIN.
func (c *proxyConn) kill(reset bool) {
	c.once.Do(func() {
		c.mu.Lock()
		srv := c.server
		c.mu.Unlock()
		for _, nc := range []net.Conn{c.client, srv} {
			if nc == nil {
				continue
			}
			if tc, ok := nc.(*net.TCPConn); ok && reset {
				_ = tc.SetLinger(0)
			}
			_ = nc.Close()
		}
		close(c.done)
	})
}

// NewProxy listens on a free loopback port. The target may be set later
// (SetTarget), before the first connection arrives.
func NewProxy(name string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{name: name, ln: ln, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Name is the link the proxy stands for, as given to NewProxy.
func (p *Proxy) Name() string { return p.name }

// Addr is the address clients of the link connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget sets the address connections are forwarded to.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// notifyLocked wakes every pump waiting on a hold. p.mu is held.
func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Blackhole holds the client-to-server direction (up) and/or the
// server-to-client direction (down); false opens a direction again.
func (p *Proxy) Blackhole(up, down bool) {
	p.mu.Lock()
	p.holdUp, p.holdDn = up, down
	p.notifyLocked()
	p.mu.Unlock()
}

// SetDelay adds d to every chunk forwarded in either direction (0 removes
// it).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.notifyLocked()
	p.mu.Unlock()
}

// Pass removes every hold and delay; open connections carry on.
func (p *Proxy) Pass() {
	p.mu.Lock()
	p.holdUp, p.holdDn, p.delay = false, false, 0
	p.notifyLocked()
	p.mu.Unlock()
}

// Drop closes every open connection (a FIN to both ends); new ones are
// accepted as before.
func (p *Proxy) Drop() { p.killAll(false) }

// Reset ends every open connection with a TCP RST to both ends.
func (p *Proxy) Reset() { p.killAll(true) }

func (p *Proxy) killAll(reset bool) {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.kill(reset)
	}
}

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// State describes the proxy's holds and delay, for logs.
func (p *Proxy) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.holdUp && p.holdDn:
		return "blackhole"
	case p.holdUp:
		return "blackhole-up"
	case p.holdDn:
		return "blackhole-down"
	case p.delay > 0:
		return fmt.Sprintf("delay %v", p.delay)
	default:
		return "pass"
	}
}

// Close stops accepting, ends every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.killAll(false)
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &proxyConn{client: nc, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = nc.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// wait blocks while dir is held; false if the connection ended meanwhile.
// It returns the delay to apply.
func (p *Proxy) wait(c *proxyConn, up bool) (time.Duration, bool) {
	for {
		p.mu.Lock()
		held := p.holdDn
		if up {
			held = p.holdUp
		}
		d, ch := p.delay, p.changed
		p.mu.Unlock()
		if !held {
			return d, true
		}
		select {
		case <-ch:
		case <-c.done:
			return 0, false
		}
	}
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.kill(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if _, ok := p.wait(c, true); !ok {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	srv, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.server = srv
	c.mu.Unlock()
	select {
	case <-c.done: // killed while dialling
		_ = srv.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(c, c.client, srv, true) }()
	go func() { defer wg.Done(); p.pump(c, srv, c.client, false) }()
	wg.Wait()
}

// pump copies src to dst through the holds and delays of direction up.
// A reader goroutine keeps reading into a bounded queue, so that a peer
// closing its end is seen even while the direction is held; the held
// bytes still go out first when the direction opens (a request sent
// before a partition may arrive after it).
func (p *Proxy) pump(c *proxyConn, src, dst net.Conn, up bool) {
	q := make(chan []byte, 64)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- buf[:n]:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for chunk := range q {
		d, ok := p.wait(c, up)
		if !ok {
			return
		}
		if d > 0 {
			select {
			case <-time.After(d):
			case <-c.done:
				return
			}
		}
		if _, err := dst.Write(chunk); err != nil {
			c.kill(false)
			return
		}
	}
	// The source finished (EOF or error): pass the half-close on, so a
	// peer that closed its writing side is seen as such; the other
	// direction may still have bytes to deliver.
	select {
	case <-c.done:
		return
	default:
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
			c.kill(false)
		}
	} else {
		c.kill(false)
	}
}
