package metrics

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/testcerts"
)

// serveWith starts the endpoints on a loopback port behind acc, over tc
// when it is not nil, and returns the base URL.
func serveWith(t *testing.T, acc Access, tc *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if tc != nil {
		ln, scheme = tls.NewListener(ln, tc), "https"
	}
	s := Serve(ln, fakeBroker(), acc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { s.Close() })
	return scheme + "://" + s.Addr().String()
}

// ask GETs url with the Authorization header auth ("" for none) and
// returns the status code and the WWW-Authenticate challenges.
func ask(t *testing.T, c *http.Client, url, authz string) (int, []string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Values("WWW-Authenticate")
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	c := http.DefaultClient
	base := serveWith(t, Access{}, nil)
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol", "/debug/pprof/trace?seconds=0"} {
		if code, _ := ask(t, c, base+p, ""); code != http.StatusNotFound {
			t.Errorf("pprof off: %s answered %d, want 404", p, code)
		}
	}
	// The rest is open without a login.
	for _, p := range []string{"/", "/stats", "/stats/history", "/metrics", "/health/live", "/health/ready"} {
		if code, _ := ask(t, c, base+p, ""); code != http.StatusOK {
			t.Errorf("no login: %s answered %d, want 200", p, code)
		}
	}
	base = serveWith(t, Access{Pprof: true}, nil)
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"} {
		if code, _ := ask(t, c, base+p, ""); code != http.StatusOK {
			t.Errorf("pprof on: %s answered %d, want 200", p, code)
		}
	}
}

func TestTokenProtectsAllButProbesAndMetrics(t *testing.T) {
	c := http.DefaultClient
	base := serveWith(t, Access{Pprof: true, Token: "s3cret"}, nil)
	for _, p := range []string{"/", "/stats", "/stats/history", "/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/nothing-here", "/health/../stats"} {
		for _, authz := range []string{"", "Bearer wrong", "Bearer s3cre", "Bearer s3cret2", "s3cret", "Basic czNjcmV0"} {
			code, challenge := ask(t, c, base+p, authz)
			if code != http.StatusUnauthorized || len(challenge) != 1 || challenge[0] != `Bearer realm="moonmq metrics"` {
				t.Errorf("%s with %q: %d %q, want 401 with a Bearer challenge", p, authz, code, challenge)
			}
		}
	}
	for _, p := range []string{"/", "/stats", "/stats/history", "/debug/pprof/", "/metrics", "/health/live", "/health/ready"} {
		if code, _ := ask(t, c, base+p, "Bearer s3cret"); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", p, code)
		}
	}
	if code, _ := ask(t, c, base+"/nothing-here", "Bearer s3cret"); code != http.StatusNotFound {
		t.Errorf("an unknown path with the token: %d, want 404", code)
	}
	// Probes and scrapers need nothing.
	for _, p := range []string{"/health/live", "/health/ready", "/metrics"} {
		if code, _ := ask(t, c, base+p, ""); code != http.StatusOK {
			t.Errorf("%s without the token: %d, want 200", p, code)
		}
	}
	if code, _ := ask(t, c, base+"/health/live", "Bearer wrong"); code != http.StatusOK {
		t.Errorf("/health/live with a wrong token: %d, want 200", code)
	}

	base = serveWith(t, Access{Token: "s3cret", ProtectMetrics: true}, nil)
	if code, challenge := ask(t, c, base+"/metrics", ""); code != http.StatusUnauthorized || len(challenge) != 1 {
		t.Errorf("ProtectMetrics: /metrics without the token: %d %q, want 401", code, challenge)
	}
	if code, _ := ask(t, c, base+"/metrics", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("ProtectMetrics: /metrics with the token: %d", code)
	}
	for _, p := range []string{"/health/live", "/health/ready"} {
		if code, _ := ask(t, c, base+p, ""); code != http.StatusOK {
			t.Errorf("ProtectMetrics: %s without the token: %d, want 200", p, code)
		}
	}
	// Without Pprof the profiles are not there even with the token.
	if code, _ := ask(t, c, base+"/debug/pprof/", "Bearer s3cret"); code != http.StatusNotFound {
		t.Errorf("pprof off, with the token: %d, want 404", code)
	}
}

func TestBasicCredentials(t *testing.T) {
	c := http.DefaultClient
	base := serveWith(t, Access{Token: "tok", Username: "ops", Password: "pw"}, nil)
	basic := func(u, p string) string {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth(u, p)
		return r.Header.Get("Authorization")
	}
	for _, authz := range []string{basic("ops", "pw"), "Bearer tok"} {
		if code, _ := ask(t, c, base+"/stats", authz); code != http.StatusOK {
			t.Errorf("/stats with %q: %d, want 200", authz, code)
		}
	}
	for _, authz := range []string{"", basic("ops", "nope"), basic("nope", "pw"), basic("ops", ""), basic("", "")} {
		code, challenge := ask(t, c, base+"/stats", authz)
		// A browser asks for the password on the Basic challenge.
		if code != http.StatusUnauthorized || strings.Join(challenge, "; ") != `Bearer realm="moonmq metrics"; Basic realm="moonmq metrics", charset="UTF-8"` {
			t.Errorf("/stats with %q: %d %q", authz, code, challenge)
		}
	}
}

func TestMetricsPortTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	// The same loader as the client port's TLS.
	tc, err := auth.LoadListenerTLS(&auth.TLSFiles{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile}, "Metrics.TLS")
	if err != nil {
		t.Fatal(err)
	}
	base := serveWith(t, Access{Token: "s3cret"}, tc)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CAs}}}
	defer c.CloseIdleConnections()
	if code, _ := ask(t, c, base+"/stats", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("/stats over TLS: %d", code)
	}
	if code, _ := ask(t, c, base+"/stats", ""); code != http.StatusUnauthorized {
		t.Errorf("/stats over TLS without the token: %d", code)
	}
	if code, _ := ask(t, c, base+"/health/ready", ""); code != http.StatusOK {
		t.Errorf("/health/ready over TLS: %d", code)
	}
	// Plain HTTP gets no answer from the TLS port.
	plain := "http://" + strings.TrimPrefix(base, "https://")
	resp, err := http.Get(plain + "/health/live")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the TLS port answered plain HTTP")
		}
	}
}
