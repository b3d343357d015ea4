package shipping

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// testHandlerWrap lets a test rewrite fetch responses.
type testHandlerWrap struct {
	h http.Handler
	// rewrite, when set, may alter a 200 fetch response body.
	rewrite func(body []byte) []byte
	// asOlderBuild hides a fetch request's Content-Type, so the handler
	// reads every request as JSON, as leaders before the binary framing
	// did.
	asOlderBuild bool
	// binaryFetches and jsonFetches count fetch requests as sent.
	binaryFetches, jsonFetches atomic.Int64
}

func (w *testHandlerWrap) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == PathFetch {
		if r.Header.Get("Content-Type") == ContentTypeBinary {
			w.binaryFetches.Add(1)
		} else {
			w.jsonFetches.Add(1)
		}
		if w.asOlderBuild {
			r.Header.Del("Content-Type")
		}
	}
	if w.rewrite == nil || r.URL.Path != PathFetch {
		w.h.ServeHTTP(rw, r)
		return
	}
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	if rec.Code == http.StatusOK {
		body = w.rewrite(body)
	}
	for k, v := range rec.Header() {
		rw.Header()[k] = v
	}
	rw.WriteHeader(rec.Code)
	_, _ = rw.Write(body)
}
