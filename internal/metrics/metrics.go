// Package metrics owns the operator HTTP endpoints on the metrics port:
// the status page at / (with /stats/history behind its charts), /stats
// (JSON), /metrics (Prometheus), /health/live, /health/ready and, when its
// Access allows, /debug/pprof; and who may read them (Access: a bearer
// token or basic credentials for everything but the probes).
//
// It only reads what its Source hands it; it may not reach into the broker
// or storage. TLS is the caller's: it hands Serve a TLS listener.
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

	"github.com/moonmq/moonmq/internal/auth"
)

// Source is what the endpoints report on.
type Source struct {
	// Stats returns the /stats document.
	Stats func() any
	// Registry backs /metrics.
	Registry *prometheus.Registry
	// Ready reports whether the broker serves clients, and why not.
	Ready func() (bool, string)
	// HistoryEvery is how often the status page's throughput history is
	// sampled; 0 means every 5 s.
	HistoryEvery time.Duration
}

// Access is who may read the endpoints and whether profiles are served
// (the config's Metrics block). The zero Access serves everything but
// profiles to anyone.
type Access struct {
	// Pprof serves /debug/pprof. Off by default: a profile or trace
	// costs the broker CPU for as long as the caller asks, and shows
	// its code and memory.
	Pprof bool
	// Token, when set, is a bearer token that opens the protected
	// endpoints.
	Token string
	// Username and Password, when set, are HTTP basic credentials that
	// open them as the Token does (a browser can send these).
	Username, Password string
	// ProtectMetrics puts /metrics behind the login too.
	ProtectMetrics bool
}

// The routes that stay open with a login: probes cannot log in, and
// Prometheus scrapers often do not.
const (
	routeLive    = "GET /health/live"
	routeReady   = "GET /health/ready"
	routeMetrics = "GET /metrics"
)

// realm names the metrics port in the WWW-Authenticate challenges.
const realm = `realm="moonmq metrics"`

func (a Access) hasLogin() bool { return a.Token != "" || a.Username != "" }

// allowed reports whether req carries the Token or the basic
// credentials, compared in constant time.
func (a Access) allowed(req *http.Request) bool {
	if a.Token != "" && auth.BearerOK(req, a.Token) {
		return true
	}
	if a.Username == "" {
		return false
	}
	user, pass, ok := req.BasicAuth()
	// Both compared, whatever the first says, so a wrong user name
	// answers no sooner than a wrong password.
	userOK, passOK := auth.SecretEqual(user, a.Username), auth.SecretEqual(pass, a.Password)
	return ok && userOK && passOK
}

// guard puts mux behind the login. Which route a request takes is the
// mux's own decision (its pattern), so a path that the mux cleans or
// redirects cannot slip past as an open one; unknown paths need the login
// too.
func (a Access) guard(mux *http.ServeMux) http.Handler {
	if !a.hasLogin() {
		return mux
	}
	open := map[string]bool{routeLive: true, routeReady: true, routeMetrics: !a.ProtectMetrics}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, pattern := mux.Handler(req); open[pattern] || a.allowed(req) {
			mux.ServeHTTP(w, req)
			return
		}
		if a.Token != "" {
			w.Header().Add("WWW-Authenticate", "Bearer "+realm)
		}
		if a.Username != "" {
			w.Header().Add("WWW-Authenticate", "Basic "+realm+`, charset="UTF-8"`)
		}
		http.Error(w, "unauthorized: this endpoint of the metrics port needs the Metrics.Token (Authorization: Bearer) or Metrics.Username/Password", http.StatusUnauthorized)
	})
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

// Handler returns the endpoints as an http.Handler, behind acc. Its
// /stats/history is empty: Serve keeps the history.
func Handler(src Source, acc Access) http.Handler { return handler(src, acc, nil) }

func handler(src Source, acc Access, hist *history) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", serveStatusPage)
	mux.HandleFunc("GET /stats/history", serveHistory(hist))
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(src.Stats())
	})
	mux.Handle(routeMetrics, promhttp.HandlerFor(src.Registry, promhttp.HandlerOpts{}))
	if acc.Pprof {
		// Profiles are how performance work starts here ("profile
		// before optimizing"); the bench tools turn them on.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc(routeLive, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(routeReady, func(w http.ResponseWriter, r *http.Request) {
		if src.Ready != nil {
			if ok, why := src.Ready(); !ok {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return acc.guard(mux)
}

// Serve starts the endpoints on ln, behind acc. Close stops them.
func Serve(ln net.Listener, src Source, acc Access, log *slog.Logger) *Server {
	hist := newHistory()
	every := src.HistoryEvery
	if every <= 0 {
		every = historyEvery
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		srv:     &http.Server{Handler: handler(src, acc, hist), ReadHeaderTimeout: 10 * time.Second},
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
