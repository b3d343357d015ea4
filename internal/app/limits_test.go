package app_test

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
)

// served reports whether a new connection gets an answer to ApiVersions.
func served(t *testing.T, addr string) (net.Conn, bool) {
	t.Helper()
	c := rawConn(t, addr)
	send(t, c, 1, kmsg.NewPtrApiVersionsRequest())
	var sz [4]byte
	if _, err := c.Read(sz[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("no answer and no close")
		}
		c.Close()
		return nil, false
	}
	return c, true
}

// eventuallyServed waits (generously) until a connection is served again:
// a closed connection is uncounted when the broker notices it is gone.
func eventuallyServed(t *testing.T, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, ok := served(t, addr); ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("connections are still refused after one was closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConnectionLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		edit  func(*config.Server)
		limit string
	}{
		"overall": {func(s *config.Server) { s.MaxConnections = 2 }, "limit=MaxConnections "},
		"per IP":  {func(s *config.Server) { s.MaxConnectionsPerIP = 2 }, "limit=MaxConnectionsPerIP"},
	} {
		t.Run(name, func(t *testing.T) {
			in, lc := startLogged(t, tc.edit)
			first, ok1 := served(t, in.Addr())
			_, ok2 := served(t, in.Addr())
			if !ok1 || !ok2 {
				t.Fatal("the first two connections were refused")
			}
			if _, ok := served(t, in.Addr()); ok {
				t.Fatal("a third connection was served")
			}
			lc.waitFor("refused client connection", "peer=127.0.0.1:", tc.limit)
			first.Close()
			eventuallyServed(t, in.Addr())
		})
	}
}
