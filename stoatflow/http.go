package stoatflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// startHTTP serves health, metrics and interactive queries on http.port.
func (a *App) startHTTP() (stop func(), err error) {
	if a.cfg.HTTP.Port < 0 {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(a.cfg.HTTP.Host, strconv.Itoa(a.cfg.HTTP.Port)))
	if err != nil {
		return nil, fmt.Errorf("key stoatflow.http.port: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, r *http.Request) {
		if why := a.restartRequired.Load(); why != nil {
			httpError(w, http.StatusServiceUnavailable, errors.New(*why))
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		ready, why := a.readiness()
		body := map[string]any{"ready": ready, "restoredRecords": a.restore.done.Load(), "restoreTotal": a.restore.total.Load()}
		if why != "" {
			body["why"] = why
		}
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	if a.cfg.HA.Mode == "active-standby" {
		a.registerHA(mux)
	}
	mux.HandleFunc("GET /state/{store}", a.serveRange)
	mux.HandleFunc("GET /state/{store}/{key...}", a.serveGet)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	a.httpURL = "http://" + ln.Addr().String()
	a.log.Info("http listening", "addr", ln.Addr().String())
	go srv.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// HTTPAddr is the address the HTTP server listens on ("" when off).
func (a *App) HTTPAddr() string { return strings.TrimPrefix(a.httpURL, "http://") }

// Ready reports whether the stores are restored and processing runs.
func (a *App) Ready() bool { return a.ready.Load() }

func (a *App) queryStore(name string) (*storeSpec, int, error) {
	s := a.topo.stores[name]
	if s == nil {
		return nil, 0, fmt.Errorf("no store named %q", name)
	}
	if !a.ready.Load() {
		return nil, 0, errNotReady
	}
	return s, a.subs[s.sub].partitions, nil
}

var errNotReady = errors.New("not ready: the stores are restoring")

// storeError answers a query for a store that is unknown (404) or not
// ready yet (503).
func storeError(w http.ResponseWriter, err error) {
	code := http.StatusNotFound
	if errors.Is(err, errNotReady) {
		code = http.StatusServiceUnavailable
	}
	httpError(w, code, err)
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// storeLag says how many writes to a store are processed but not yet
// committed, so not yet visible to queries.
func (a *App) setLagHeader(w http.ResponseWriter, s *storeSpec) {
	w.Header().Set("X-StoatFlow-Store-Lag", strconv.FormatInt(a.metrics.pendingWrites(s.name), 10))
}

func (a *App) serveGet(w http.ResponseWriter, r *http.Request) {
	s, parts, err := a.queryStore(r.PathValue("store"))
	if err != nil {
		storeError(w, err)
		return
	}
	if s.keyAny.parse == nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("store %s: its key serde has no text form (implement TextSerde)", s.name))
		return
	}
	if s.kind == kindWindow || s.kind == kindSession {
		a.serveWindowGet(w, r, s, parts)
		return
	}
	k, err := s.keyAny.parse(r.PathValue("key"))
	if err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("key: %w", err))
		return
	}
	kb, err := s.keyAny.enc(k)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	a.setLagHeader(w, s)
	for p := 0; p < parts; p++ {
		vb, ok, err := a.engineFor(s).Partition(s.name, int32(p)).Get(kb)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		if !ok {
			continue
		}
		v, err := s.valAny.dec(vb)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"store": s.name, "key": k, "value": v, "partition": p})
		return
	}
	httpError(w, http.StatusNotFound, fmt.Errorf("store %s has no key %q", s.name, r.PathValue("key")))
}

// serveRange answers GET /state/<store>?from=&to=&prefix=&limit= with the
// keys in [from, to) (or with the prefix) across every partition, in key
// order.
func (a *App) serveRange(w http.ResponseWriter, r *http.Request) {
	s, parts, err := a.queryStore(r.PathValue("store"))
	if err != nil {
		storeError(w, err)
		return
	}
	if s.kind == kindWindow || s.kind == kindSession {
		a.serveWindowRange(w, r, s, parts)
		return
	}
	q := r.URL.Query()
	limit := 1000
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			httpError(w, http.StatusBadRequest, fmt.Errorf("limit: %q is not a positive number", l))
			return
		}
	}
	bound := func(name string) ([]byte, error) {
		t := q.Get(name)
		if t == "" {
			return nil, nil
		}
		if s.keyAny.parse == nil {
			return nil, fmt.Errorf("store %s: its key serde has no text form", s.name)
		}
		k, err := s.keyAny.parse(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return s.keyAny.enc(k)
	}
	lo, err1 := bound("from")
	hi, err2 := bound("to")
	pre, err3 := bound("prefix")
	if err := errors.Join(err1, err2, err3); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if pre != nil {
		lo, hi = pre, state.PrefixEnd(pre)
	}
	if s.hasMeta && (hi == nil || bytes.Compare(hi, dataEnd) > 0) {
		hi = dataEnd // leave the store's bookkeeping out
	}
	type kv struct {
		kb  []byte
		Key any `json:"key"`
		Val any `json:"value"`
	}
	var out []kv
	for p := 0; p < parts; p++ {
		var derr error
		err := a.engineFor(s).Partition(s.name, int32(p)).Scan(lo, hi, func(kb, vb []byte) bool {
			// Kept past the iteration, which reuses its buffers.
			kb, vb = bytes.Clone(kb), bytes.Clone(vb)
			k, err := s.keyAny.dec(kb)
			if err != nil {
				derr = err
				return false
			}
			if s.decodeKey != nil {
				k, err = s.decodeKey(kb)
				if err != nil {
					derr = err
					return false
				}
			}
			v, err := s.valAny.dec(vb)
			if err != nil {
				derr = err
				return false
			}
			out = append(out, kv{kb: kb, Key: k, Val: v})
			return len(out) < limit*parts
		})
		if err = errors.Join(err, derr); err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].kb, out[j].kb) < 0 })
	if len(out) > limit {
		out = out[:limit]
	}
	a.setLagHeader(w, s)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"store": s.name, "entries": out})
}

// QueryKeyValue reads the committed value of k in a key-value store of a
// running App: what GET /state/<store>/<key> answers.
func QueryKeyValue[K, V any](a *App, store string, k K) (v V, ok bool, err error) {
	s, parts, err := a.queryStore(store)
	if err != nil {
		return v, false, err
	}
	ks, ok1 := s.keySerde.(Serde[K])
	vs, ok2 := s.valSerde.(Serde[V])
	if !ok1 || !ok2 || s.kind != kindKeyValue {
		return v, false, fmt.Errorf("store %s is a %s store of %s", s.name, s.kind, s.types)
	}
	kb, err := ks.Encode(k)
	if err != nil {
		return v, false, err
	}
	for p := 0; p < parts; p++ {
		vb, found, err := a.engineFor(s).Partition(s.name, int32(p)).Get(kb)
		if err != nil || !found {
			if err != nil {
				return v, false, err
			}
			continue
		}
		v, err = vs.Decode(vb)
		return v, err == nil, err
	}
	return v, false, nil
}
