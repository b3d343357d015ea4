package testenv

import (
	"net"
	"sync"
)

// CutProxy forwards TCP connections to one address until it is cut. A
// cut stalls every byte in both directions, on open connections and new
// ones alike, without closing anything: the peers see what a partitioned
// network shows them, silence, and find out only by their own timeouts.
// Heal lets the stalled bytes through.
type CutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	open  chan struct{} // closed while bytes flow
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartCutProxy listens on a free loopback port and forwards to target
// until the test ends. A pod dials through it when started with
// STOATFLOW_TEST_BROKER_VIA=<target>=<Addr()> (crashpoint.BrokerVia).
func StartCutProxy(t TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := &CutProxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Heal()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops the flow; Heal resumes it.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

func (p *CutProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *CutProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			<-p.gate() // a cut network does not connect either
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			var both sync.WaitGroup
			both.Add(2)
			go func() { defer both.Done(); p.pipe(up, c) }()
			go func() { defer both.Done(); p.pipe(c, up) }()
			both.Wait()
		}()
	}
}

// pipe copies src to dst through the gate, and closes both when either
// side ends.
func (p *CutProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
