package app_test

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/testcerts"
)

func certs(t *testing.T) *testcerts.Set {
	t.Helper()
	s, err := testcerts.Generate(t.TempDir(), "client-app")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withTLS(c *testcerts.Set, mutual bool) func(*config.Server) {
	return func(s *config.Server) {
		s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile}
		if mutual {
			s.TLS.ClientCAFile, s.TLS.RequireClientCert = c.CAFile, true
		}
	}
}

// roundTrip produces and reads back a few records with the given options.
func roundTrip(t *testing.T, addr, topic string, opts ...kgo.Opt) {
	t.Helper()
	cl := client(t, addr, append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation()}, opts...)...)
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce over TLS: %v", err)
		}
	}
	for i, r := range consumeAll(t, addr, topic, 5, opts...) {
		if string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d is %q", i, r.Value)
		}
	}
}

func TestTLS(t *testing.T) {
	c := certs(t)
	in, lc := startLogged(t, withTLS(c, false))
	trust := kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs})
	roundTrip(t, in.Addr(), "over-tls", trust)

	// A plaintext client is refused at the handshake, with a log line
	// that says what is wrong.
	if err := ping(client(t, in.Addr(), kgo.RequestRetries(0))); err == nil {
		t.Fatal("a plaintext client was served by a TLS port")
	}
	lc.waitFor("closed client connection", "TLS handshake failed")
	// So is a client that does not trust the broker's certificate.
	if err := ping(client(t, in.Addr(), kgo.RequestRetries(0), kgo.DialTLSConfig(&tls.Config{}))); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}
}

func TestSASLOverTLS(t *testing.T) {
	c := certs(t)
	in, _ := startLogged(t, withTLS(c, false), withUsers(config.User{Username: "app", Password: "app-secret"}))
	trust := kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs})
	for _, mech := range []string{auth.Plain, auth.ScramSHA512} {
		roundTrip(t, in.Addr(), strings.ToLower("tls-"+mech), trust, kgo.SASL(mechanism(mech, "app", "app-secret")))
	}
	if err := ping(client(t, in.Addr(), trust, kgo.RequestRetries(0))); err == nil {
		t.Fatal("TLS without a login was served although users exist")
	}
}

func TestMutualTLS(t *testing.T) {
	c := certs(t)
	in, lc := startLogged(t, withTLS(c, true))
	withCert := kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs, Certificates: []tls.Certificate{c.Client}})
	roundTrip(t, in.Addr(), "mtls", withCert)

	if err := ping(client(t, in.Addr(), kgo.RequestRetries(0), kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs}))); err == nil {
		t.Fatal("a client without a certificate connected although RequireClientCert is set")
	}
	lc.waitFor("closed client connection", "TLS handshake failed")

	// A certificate from another CA is refused too.
	other := certs(t)
	foreign := kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs, Certificates: []tls.Certificate{other.Client}})
	if err := ping(client(t, in.Addr(), kgo.RequestRetries(0), foreign)); err == nil {
		t.Fatal("a client certificate from an unknown CA was accepted")
	}
}

// TestOptionalClientCert: with ClientCAFile but not RequireClientCert a
// client may come without a certificate, but one it shows must be valid.
func TestOptionalClientCert(t *testing.T) {
	c := certs(t)
	in, _ := startLogged(t, func(s *config.Server) {
		s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile}
	})
	if err := ping(client(t, in.Addr(), kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs}))); err != nil {
		t.Fatalf("a client without a certificate: %v", err)
	}
	other := certs(t)
	if err := ping(client(t, in.Addr(), kgo.RequestRetries(0), kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs, Certificates: []tls.Certificate{other.Client}}))); err == nil {
		t.Fatal("an invalid client certificate was accepted")
	}
}

func TestTLSConfigErrors(t *testing.T) {
	c := certs(t)
	cases := map[string]struct {
		tls  config.TLS
		want string
	}{
		"missing cert":  {config.TLS{CertFile: c.ServerCertFile + ".nope", KeyFile: c.ServerKeyFile}, `"TLS.CertFile"`},
		"key mismatch":  {config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ClientKeyFile}, `"TLS.KeyFile"`},
		"CA not PEM":    {config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.ServerKeyFile}, `"TLS.ClientCAFile"`},
		"CA is missing": {config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile + ".nope"}, `"TLS.ClientCAFile"`},
	}
	for name, tc := range cases {
		cfg := config.Default()
		cfg.Port, cfg.MetricsPort, cfg.DataDir = 0, 0, t.TempDir()
		tlsCfg := tc.tls
		cfg.TLS = &tlsCfg
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		in, err := app.Start(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		if err == nil {
			in.Close()
			t.Fatalf("%s: the broker started", name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not name %s", name, err, tc.want)
		}
	}
}
