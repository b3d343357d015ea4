package raftgroup

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/testcerts"
	pb "go.etcd.io/raft/v3/raftpb"
)

// lockedBuffer is a log destination the senders write from their
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHTTPTransportTLS: with TLS set the transport posts over https,
// verified with the CA; a peer whose certificate the CA did not sign
// gets nothing, and that is logged once, not once per message.
func TestHTTPTransportTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *pb.Message, 16)
	srv := httptest.NewUnstartedServer(NewHandler("tok", func(m *pb.Message) bool { got <- m; return true }))
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")

	var logs lockedBuffer
	good := NewHTTPTransport(HTTPConfig{Peers: map[int32]string{2: addr}, Token: "tok", Timeout: time.Second,
		TLS: &tls.Config{RootCAs: certs.CAs}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer good.Close()
	if !good.Send(&pb.Message{To: new(uint64(2)), From: new(uint64(1)), Type: pb.MsgHeartbeat.Enum(), Term: new(uint64(7))}) {
		t.Fatal("not queued")
	}
	select {
	case m := <-got:
		if m.GetTerm() != 7 {
			t.Fatalf("received %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received over TLS")
	}

	bad := NewHTTPTransport(HTTPConfig{Peers: map[int32]string{2: addr}, Token: "tok", Timeout: time.Second,
		TLS: &tls.Config{RootCAs: other.CAs}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer bad.Close()
	for range 5 {
		bad.Send(&pb.Message{To: new(uint64(2)), From: new(uint64(3)), Type: pb.MsgHeartbeat.Enum(), Term: new(uint64(8))})
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "does not verify against Replication.TLS.ClientCAFile") {
		if time.Now().After(deadline) {
			t.Fatalf("no TLS failure logged: %q", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(logs.String(), "TLS with a peer failed"); n != 1 {
		t.Fatalf("%d lines for one failing peer:\n%s", n, logs.String())
	}
	select {
	case m := <-got:
		t.Fatalf("received %v from a transport with the wrong CA", m)
	default:
	}

	// A transport without TLS reaching the TLS port is told so.
	plain := NewHTTPTransport(HTTPConfig{Peers: map[int32]string{2: addr}, Token: "tok", Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer plain.Close()
	plain.Send(&pb.Message{To: new(uint64(2)), From: new(uint64(3)), Type: pb.MsgHeartbeat.Enum()})
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "this replica sent plain HTTP") {
		if time.Now().After(deadline) {
			t.Fatalf("plain HTTP to TLS not logged: %q", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := TLSFailure(nil); ok {
		t.Fatal("nil is a TLS failure")
	}
}
