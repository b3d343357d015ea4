// Package metrics owns the operator HTTP endpoints on the metrics port:
// the status page at / (with /stats/history behind its charts), /stats
// (JSON), /metrics (Prometheus), /health/live, /health/ready and
// /debug/pprof.
//
// It only reads what its Source hands it; it may not reach into the broker
// or storage.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the endpoints report on.
type Source struct {
	// Stats returns the /stats document.
	Stats func() any
	// Registry backs /metrics.
	Registry *prometheus.Registry
	// Ready reports whether the broker serves clients.
	Ready func() bool
	// HistoryEvery is how often the status page's throughput history is
	// sampled; 0 means every 5 s.
	HistoryEvery time.Duration
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	// stop ends the history sampler; sampled is closed when it has.
	stop    context.CancelFunc
	sampled chan struct{}
}

// Handler returns the endpoints as an http.Handler. Its /stats/history is
// empty: Serve keeps the history.
func Handler(src Source) http.Handler { return handler(src, nil) }

func handler(src Source, hist *history) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", serveStatusPage)
	mux.HandleFunc("GET /stats/history", serveHistory(hist))
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(src.Stats())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(src.Registry, promhttp.HandlerOpts{}))
	// Profiles are how performance work starts here ("profile before
	// optimizing"); they are on the metrics port, which is operator-only.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		if src.Ready != nil && !src.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// Serve starts the endpoints on ln. Close stops them.
func Serve(ln net.Listener, src Source, log *slog.Logger) *Server {
	hist := newHistory()
	every := src.HistoryEvery
	if every <= 0 {
		every = historyEvery
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		srv:     &http.Server{Handler: handler(src, hist), ReadHeaderTimeout: 10 * time.Second},
		ln:      ln,
		done:    make(chan struct{}),
		stop:    stop,
		sampled: make(chan struct{}),
	}
	go func() { defer close(s.sampled); hist.run(ctx, src, every) }()
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server and waits for it.
func (s *Server) Close() error {
	// The sampler reads the broker: it stops before Close returns.
	s.stop()
	<-s.sampled
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
