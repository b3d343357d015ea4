package broker

import (
	"net"
	"sync"
	"time"
)

// connLimits counts client connections, overall and per address, across
// the broker's listeners, against Server.MaxConnections and
// Server.MaxConnectionsPerIP (0: unlimited).
type connLimits struct {
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int

	// Refusals are logged at most once per second: a flood of refused
	// connections must not become a flood of log lines.
	lastLog    time.Time
	suppressed int
}

// admit counts a new connection from ip, or reports why it must be
// refused ("" when admitted).
func (l *connLimits) admit(ip string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		return "MaxConnections"
	}
	if l.perIP > 0 && l.byIP[ip] >= l.perIP {
		return "MaxConnectionsPerIP"
	}
	l.total++
	if l.byIP == nil {
		l.byIP = map[string]int{}
	}
	l.byIP[ip]++
	return ""
}

// release uncounts a connection admit counted.
func (l *connLimits) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// logRefusal reports whether to log a refusal now, and how many refusals
// went unlogged before it.
func (l *connLimits) logRefusal(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastLog) < time.Second {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.lastLog, l.suppressed = now, 0
	return true, n
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
	limit := l.admit(ip)
	if limit == "" {
		return true
	}
	c.Close()
	if ok, suppressed := l.logRefusal(time.Now()); ok {
		b.log.Warn("refused client connection", "peer", c.RemoteAddr().String(), "limit", limit,
			"max_connections", l.max, "max_connections_per_ip", l.perIP, "refused_unlogged_before", suppressed)
	}
	return false
}
