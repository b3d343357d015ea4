package broker

import (
	stdlog "log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// handshakeRelog is how often failed handshakes from one address are
// logged: a misconfigured peer retries several times a second.
const handshakeRelog = time.Minute

// serverErrorLog is the replication HTTP server's ErrorLog: its lines go to
// log, failed TLS handshakes at most once per handshakeRelog and address
// (with the number left out).
func serverErrorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(&handshakeLog{log: log, last: map[string]handshakeSeen{}}, "", 0)
}

type handshakeSeen struct {
	at         time.Time
	suppressed int
}

type handshakeLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]handshakeSeen // by address without port
}

// handshakePrefix starts net/http's line for a failed handshake:
// "http: TLS handshake error from 127.0.0.1:5555: <reason>".
const handshakePrefix = "http: TLS handshake error from "

func (h *handshakeLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	rest, ok := strings.CutPrefix(line, handshakePrefix)
	if !ok {
		h.log.Warn("replication HTTP server: " + line)
		return len(p), nil
	}
	from, reason, _ := strings.Cut(rest, ": ")
	host := from
	if hh, _, err := net.SplitHostPort(from); err == nil {
		host = hh
	}
	now := time.Now()
	h.mu.Lock()
	seen, known := h.last[host]
	if known && now.Sub(seen.at) < handshakeRelog {
		seen.suppressed++
		h.last[host] = seen
		h.mu.Unlock()
		return len(p), nil
	}
	if len(h.last) >= 1024 {
		// Many addresses (a scan): forget the quiet ones so the map
		// stays bounded.
		for k, v := range h.last {
			if now.Sub(v.at) >= handshakeRelog {
				delete(h.last, k)
			}
		}
	}
	h.last[host] = handshakeSeen{at: now}
	h.mu.Unlock()
	h.log.Warn("replication: TLS handshake with a client of the replication port failed; every replica needs Replication.TLS with the same CA (ClientCAFile) and a certificate it signed",
		"from", from, "err", reason, "not_logged_since_last", seen.suppressed)
	return len(p), nil
}
