package app_test

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/config"
)

// TestIdleAndStalledConnectionsClose: a connection that sends nothing for
// ConnectionsMaxIdleMs is closed, and so is one that stops in the middle
// of a frame for RequestReadTimeoutMs (rawConn's own deadline is 10 s, so
// a connection left open fails the test).
func TestIdleAndStalledConnectionsClose(t *testing.T) {
	in := startBroker(t, "", func(s *config.Server) {
		s.ConnectionsMaxIdleMs = 300
		s.RequestReadTimeoutMs = 300
	})
	idle := rawConn(t, in.Addr())
	expectClosed(t, idle, "idle connection")

	stalled := rawConn(t, in.Addr())
	// A 1000-byte frame of which only the size and 3 bytes arrive.
	if _, err := stalled.Write(append(binary.BigEndian.AppendUint32(nil, 1000), 0, 18, 0)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, stalled, "connection stalled mid-frame")

	// A connection that keeps talking stays open past the idle timeout.
	busy := rawConn(t, in.Addr())
	for i := 0; i < 4; i++ {
		if _, err := busy.Write(frame(18, 0, int32(i), nil, false)); err != nil {
			t.Fatal(err)
		}
		var size [4]byte
		if _, err := busy.Read(size[:]); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(busy, body); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}
