package app_test

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/testcerts"
)

// TestMetricsPortConfig: Start serves the metrics port with the Metrics
// block's login, profiles and TLS, and a wrong TLS file stops the start
// naming its key.
func TestMetricsPortConfig(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	in := startBroker(t, "", func(s *config.Server) {
		s.MetricsPort = freeLoopbackPort(t)
		s.Metrics = &config.Metrics{Pprof: true, Token: "s3cret",
			TLS: &config.TLS{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile}}
	})
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CAs}}}
	defer c.CloseIdleConnections()
	base := "https://" + in.MetricsAddr()
	askCode := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, want := range []struct {
		path, token string
		code        int
	}{
		{"/stats", "", http.StatusUnauthorized},
		{"/stats", "wrong", http.StatusUnauthorized},
		{"/stats", "s3cret", http.StatusOK},
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/", "s3cret", http.StatusOK},
		{"/metrics", "", http.StatusOK},
		{"/health/live", "", http.StatusOK},
		{"/health/ready", "", http.StatusOK},
	} {
		if code := askCode(want.path, want.token); code != want.code {
			t.Errorf("%s with token %q: %d, want %d", want.path, want.token, code, want.code)
		}
	}

	cfg := config.Default()
	cfg.Port, cfg.MetricsPort, cfg.DataDir = 0, freeLoopbackPort(t), t.TempDir()
	cfg.Metrics = &config.Metrics{TLS: &config.TLS{CertFile: "/nonexistent/cert.pem", KeyFile: certs.ServerKeyFile}}
	if _, err := app.Start(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `"Metrics.TLS.CertFile"`) {
		t.Fatalf("a missing Metrics.TLS file: %v", err)
	}
}
