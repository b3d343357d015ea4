package shipping

import (
	"net/http"
	"net/http/httptest"
)

// testHandlerWrap lets a test rewrite fetch responses.
type testHandlerWrap struct {
	h http.Handler
	// rewrite, when set, may alter a 200 fetch response body.
	rewrite func(body []byte) []byte
}

func (w *testHandlerWrap) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
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
