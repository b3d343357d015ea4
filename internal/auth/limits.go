package auth

import (
	"sync"
	"time"
)

// ConnLimits counts client connections, overall and per address, across
// the broker's listeners, against Max and PerIP (Server.MaxConnections
// and Server.MaxConnectionsPerIP; 0: unlimited). Set those before the
// first Admit; it is safe for concurrent use.
type ConnLimits struct {
	Max, PerIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int

	// Refusals are logged at most once per second: a flood of refused
	// connections must not become a flood of log lines.
	lastLog    time.Time
	suppressed int
}

// Admit counts a new connection from ip, or reports why it must be
// refused ("" when admitted): the name of the limit it would exceed.
func (l *ConnLimits) Admit(ip string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Max > 0 && l.total >= l.Max {
		return "MaxConnections"
	}
	if l.PerIP > 0 && l.byIP[ip] >= l.PerIP {
		return "MaxConnectionsPerIP"
	}
	l.total++
	if l.byIP == nil {
		l.byIP = map[string]int{}
	}
	l.byIP[ip]++
	return ""
}

// Release uncounts a connection Admit counted.
func (l *ConnLimits) Release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// LogRefusal reports whether to log a refusal now, and how many refusals
// went unlogged before it.
func (l *ConnLimits) LogRefusal(now time.Time) (bool, int) {
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
