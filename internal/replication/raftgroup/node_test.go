package raftgroup

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
)

// httpGroup runs real Nodes (their own goroutines and tickers) talking
// over HTTP through httptest servers.
type httpGroup struct {
	ids     []int32
	nodes   map[int32]*Node
	servers map[int32]*httptest.Server
	trans   map[int32]*HTTPTransport
	mu      sync.Mutex
	handler map[int32]http.Handler
}

func newHTTPGroup(t *testing.T, n int, token string) *httpGroup {
	t.Helper()
	g := &httpGroup{nodes: map[int32]*Node{}, servers: map[int32]*httptest.Server{}, trans: map[int32]*HTTPTransport{}, handler: map[int32]http.Handler{}}
	for i := 1; i <= n; i++ {
		id := int32(i)
		g.ids = append(g.ids, id)
		g.servers[id] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.mu.Lock()
			h := g.handler[id]
			g.mu.Unlock()
			if h == nil {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		}))
	}
	for _, id := range g.ids {
		peers := map[int32]string{}
		for _, o := range g.ids {
			if o != id {
				peers[o] = strings.TrimPrefix(g.servers[o].URL, "http://")
			}
		}
		tr := NewHTTPTransport(HTTPConfig{Peers: peers, Token: token, Timeout: time.Second})
		g.trans[id] = tr
		nd, err := NewNode(Config{ID: id, Members: g.ids, Role: replication.RoleBoth, DataDir: "/d", FS: vfs.NewMem(),
			Transport: tr, Token: token, TickInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		g.nodes[id] = nd
		g.mu.Lock()
		g.handler[id] = nd.Handler()
		g.mu.Unlock()
	}
	t.Cleanup(func() {
		for _, id := range g.ids {
			g.nodes[id].Stop()
			g.trans[id].Close()
			g.servers[id].Close()
		}
	})
	return g
}

func (g *httpGroup) waitServing(t *testing.T, exclude int32) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var serving []int32
		for _, id := range g.ids {
			if id != exclude && g.nodes[id].IsServingLeader() {
				serving = append(serving, id)
			}
		}
		if len(serving) == 1 {
			return serving[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no serving leader")
	return 0
}

func TestNodeOverHTTP(t *testing.T) {
	g := newHTTPGroup(t, 3, "s3cret")
	ctx := t.Context()
	for _, id := range g.ids {
		if err := g.nodes[id].Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l := g.waitServing(t, 0)
	ln := g.nodes[l]
	st := ln.Status()
	if st.Role != "leader" || st.Leader != l || uint64(st.Epoch) != st.RaftTerm {
		t.Fatalf("leader status %+v", st)
	}
	if err := ln.ProposeISR(ctx, replication.ISRChange{Epoch: st.Epoch, ISR: []int32{1, 2, 3}, Replica: 3, Expand: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, id := range g.ids {
			if s := g.nodes[id].State(); !s.HasISR || len(s.ISR) != 3 || s.Epoch != st.Epoch {
				return false
			}
		}
		return true
	})
	// Changes carries the latest status.
	select {
	case cs := <-ln.Changes():
		if cs.ReplicaID != l {
			t.Fatalf("change %+v", cs)
		}
	case <-time.After(time.Second):
		t.Fatal("no change notification")
	}

	ln.Stop()
	if ln.IsServingLeader() {
		t.Fatal("stopped node still serving")
	}
	if err := ln.ProposeISR(ctx, replication.ISRChange{Epoch: st.Epoch, ISR: []int32{l}}); err != ErrStopped {
		t.Fatalf("propose on stopped node: %v", err)
	}
	l2 := g.waitServing(t, l)
	if e := g.nodes[l2].State().Epoch; e <= st.Epoch {
		t.Fatalf("new epoch %d, old %d", e, st.Epoch)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHandlerAuth(t *testing.T) {
	var got int
	h := NewHandler("tok", func(m *pb.Message) bool { got++; return true })
	cases := []struct {
		auth string
		body []byte
		want int
	}{
		{"", nil, http.StatusUnauthorized},
		{"Bearer nope", nil, http.StatusUnauthorized},
		{"tok", nil, http.StatusUnauthorized},
		{"Bearer tok", []byte{0xff, 0xff}, http.StatusBadRequest},
		{"Bearer tok", nil, http.StatusNoContent}, // an empty protobuf message
	}
	for _, c := range cases {
		req := httptest.NewRequest(http.MethodPost, MessagePath, bytes.NewReader(c.body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("auth %q: status %d, want %d", c.auth, rec.Code, c.want)
		}
	}
	if got != 1 {
		t.Fatalf("delivered %d messages, want 1", got)
	}
	// Any other path under /replication/raft/ needs the token too.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/replication/raft/other", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown path without token: %d", rec.Code)
	}
}

func TestStartStop(t *testing.T) {
	nd, err := NewNode(Config{ID: 1, Members: []int32{1, 2, 3}, FS: vfs.NewMem(), DataDir: "/d", Transport: nopTransport{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	nd.Stop() // before Start: no-op
	ctx, cancel := context.WithCancel(context.Background())
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(ctx); err == nil {
		t.Fatal("second Start accepted")
	}
	cancel()
	nd.Stop()
	nd.Stop()
	if _, err := NewNode(Config{ID: 4, Members: []int32{1, 2, 3}, Transport: nopTransport{}}); err == nil {
		t.Fatal("id outside members accepted")
	}
}
