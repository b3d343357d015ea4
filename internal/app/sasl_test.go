package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

// logCapture keeps a broker's log lines for assertions and forwards them
// to the test log.
type logCapture struct {
	t    *testing.T
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// waitFor waits (generously) for a log line holding every part, and fails
// the test if none comes.
func (l *logCapture) waitFor(parts ...string) string {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		text := l.buf.String()
		l.mu.Unlock()
		for _, line := range strings.Split(text, "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("no broker log line contains all of %q", parts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startLogged is startBroker with the log kept for assertions.
func startLogged(t *testing.T, edit ...func(*config.Server)) (*app.Instance, *logCapture) {
	t.Helper()
	cfg := config.Default()
	cfg.Port = 0
	cfg.MetricsPort = 0
	cfg.DataDir = t.TempDir()
	for _, e := range edit {
		e(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	lc := &logCapture{t: t}
	t.Cleanup(func() { lc.mu.Lock(); lc.done = true; lc.mu.Unlock() })
	in, err := app.Start(cfg, slog.New(slog.NewTextHandler(lc, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in, lc
}

func withUsers(users ...config.User) func(*config.Server) {
	return func(s *config.Server) { s.Users = users }
}

// hashedUser is a user configured with a pre-hashed SCRAM-SHA-512
// credential only.
func hashedUser(t *testing.T, name, password string) config.User {
	t.Helper()
	c, err := auth.NewCredential(auth.ScramSHA512, password, 8192)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding.EncodeToString
	return config.User{Username: name, Scram: []config.ScramCredential{{
		Mechanism: c.Mechanism, Salt: enc(c.Salt), Iterations: c.Iterations, StoredKey: enc(c.StoredKey), ServerKey: enc(c.ServerKey),
	}}}
}

func mechanism(name, user, pass string) sasl.Mechanism {
	switch name {
	case auth.Plain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case auth.ScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case auth.ScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
	panic(name)
}

// ping makes the client connect (and log in) and returns what it got.
func ping(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest())
	return err
}

func TestSASLLoginProduceConsume(t *testing.T) {
	in, lc := startLogged(t, withUsers(config.User{Username: "app", Password: "app-secret"}, hashedUser(t, "hashed", "hashed-secret")))
	cases := []struct{ mech, user, pass string }{
		{auth.Plain, "app", "app-secret"},
		{auth.ScramSHA256, "app", "app-secret"},
		{auth.ScramSHA512, "app", "app-secret"},
		{auth.ScramSHA512, "hashed", "hashed-secret"},
		{auth.Plain, "hashed", "hashed-secret"}, // PLAIN checks against the SCRAM-SHA-512 credential
	}
	for _, c := range cases {
		t.Run(c.mech+"-"+c.user, func(t *testing.T) {
			topic := strings.ToLower("sasl-" + c.mech + "-" + c.user)
			login := kgo.SASL(mechanism(c.mech, c.user, c.pass))
			cl := client(t, in.Addr(), login, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
			const n = 20
			for i := 0; i < n; i++ {
				if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
			got := consumeAll(t, in.Addr(), topic, n, login)
			for i, r := range got {
				if string(r.Value) != fmt.Sprint(i) {
					t.Fatalf("record %d is %q", i, r.Value)
				}
			}
			lc.waitFor("client logged in", "user="+c.user, "mechanism="+c.mech)
		})
	}
	// The pre-hashed user has no SCRAM-SHA-256 credential.
	cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.ScramSHA256, "hashed", "hashed-secret")), kgo.RequestRetries(0))
	if err := ping(cl); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("SCRAM-SHA-256 for a user with only SHA-512: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

func TestSASLFailures(t *testing.T) {
	in, lc := startLogged(t, withUsers(config.User{Username: "app", Password: "app-secret"}))

	t.Run("wrong password", func(t *testing.T) {
		for _, mech := range []string{auth.Plain, auth.ScramSHA256, auth.ScramSHA512} {
			cl := client(t, in.Addr(), kgo.SASL(mechanism(mech, "app", "guess")), kgo.RequestRetries(0))
			err := ping(cl)
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Fatalf("%s with a wrong password: %v, want SASL_AUTHENTICATION_FAILED (58)", mech, err)
			}
			lc.waitFor("SASL login failed", "peer=127.0.0.1:", "user=app", "mechanism="+mech, "wrong password")
		}
		// The failures came from one address: each was answered later
		// than the one before.
		lc.waitFor("SASL login failed", "mechanism=SCRAM-SHA-512", "delay=800ms")
	})

	t.Run("unknown user", func(t *testing.T) {
		cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.ScramSHA256, "ghost", "x")), kgo.RequestRetries(0))
		if err := ping(cl); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("unknown user: %v, want SASL_AUTHENTICATION_FAILED", err)
		}
		lc.waitFor("SASL login failed", "user=ghost", "unknown user")
	})

	t.Run("unknown mechanism", func(t *testing.T) {
		cl := client(t, in.Addr(), kgo.SASL(oauth.Auth{Token: "t"}.AsMechanism()), kgo.RequestRetries(0))
		if err := ping(cl); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
			t.Fatalf("OAUTHBEARER: %v, want UNSUPPORTED_SASL_MECHANISM (33)", err)
		}
		lc.waitFor("SASL login refused", "mechanism=OAUTHBEARER")
	})

	t.Run("no login", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		// ApiVersions is allowed: clients probe before they log in.
		send(t, c, 1, kmsg.NewPtrApiVersionsRequest())
		if resp := receive(t, c, 1, kmsg.NewPtrApiVersionsResponse()).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
			t.Fatalf("ApiVersions before login: error %d", resp.ErrorCode)
		}
		send(t, c, 2, kmsg.NewPtrMetadataRequest())
		expectClosed(t, c, "Metadata before login")
		lc.waitFor("closed client connection", "peer="+c.LocalAddr().String(), "Metadata request before SASL login")

		// And franz-go without SASL gets nowhere.
		cl := client(t, in.Addr(), kgo.RequestRetries(0))
		if err := ping(cl); err == nil {
			t.Fatal("a client without SASL read metadata")
		}
	})

	t.Run("large frame before login", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		big := make([]byte, 4+600<<10)
		binary.BigEndian.PutUint32(big, 600<<10)
		c.Write(big) // the broker may close before reading it all
		expectClosed(t, c, "600 KiB frame before login")
		lc.waitFor("closed client connection", "peer="+c.LocalAddr().String(), "before SASL login")

		// Once logged in, the usual limits apply.
		cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.ScramSHA256, "app", "app-secret")), kgo.DefaultProduceTopic("big"), kgo.AllowAutoTopicCreation())
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: make([]byte, 700<<10)}).FirstErr(); err != nil {
			t.Fatalf("700 KiB record after login: %v", err)
		}
	})

	t.Run("authenticate before handshake", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		send(t, c, 1, &kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: []byte("\x00app\x00app-secret")})
		resp := receive(t, c, 1, &kmsg.SASLAuthenticateResponse{Version: 1}).(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 34 {
			t.Fatalf("SaslAuthenticate without handshake: error %d, want ILLEGAL_SASL_STATE (34)", resp.ErrorCode)
		}
		expectClosed(t, c, "SaslAuthenticate without handshake")
	})
}

// TestSASLHandshakeV0 drives the pre-KIP-152 flow: after SaslHandshake v0
// the SASL tokens travel bare, without Kafka request headers.
func TestSASLHandshakeV0(t *testing.T) {
	in, lc := startLogged(t, withUsers(config.User{Username: "app", Password: "app-secret"}))
	handshake := func(c net.Conn, mech string) {
		t.Helper()
		send(t, c, 1, &kmsg.SASLHandshakeRequest{Version: 0, Mechanism: mech})
		if resp := receive(t, c, 1, &kmsg.SASLHandshakeResponse{Version: 0}).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
			t.Fatalf("SaslHandshake v0 %s: error %d", mech, resp.ErrorCode)
		}
	}
	metadataWorks := func(c net.Conn) {
		t.Helper()
		send(t, c, 9, kmsg.NewPtrMetadataRequest())
		resp := receive(t, c, 9, kmsg.NewPtrMetadataResponse()).(*kmsg.MetadataResponse)
		if len(resp.Brokers) != 1 {
			t.Fatalf("metadata after a v0 login: %+v", resp)
		}
	}

	t.Run("PLAIN", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		handshake(c, auth.Plain)
		writeToken(t, c, []byte("\x00app\x00app-secret"))
		if tok := readToken(t, c); len(tok) != 0 {
			t.Fatalf("PLAIN v0 answer %q, want an empty token", tok)
		}
		metadataWorks(c)
	})
	t.Run("SCRAM-SHA-512", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		handshake(c, auth.ScramSHA512)
		sess, msg, err := mechanism(auth.ScramSHA512, "app", "app-secret").Authenticate(context.Background(), in.Addr())
		if err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			writeToken(t, c, msg)
			if done, msg, err = sess.Challenge(readToken(t, c)); err != nil {
				t.Fatalf("client rejected the server: %v", err)
			}
		}
		metadataWorks(c)
	})
	t.Run("wrong password", func(t *testing.T) {
		c := rawConn(t, in.Addr())
		handshake(c, auth.Plain)
		writeToken(t, c, []byte("\x00app\x00nope"))
		expectClosed(t, c, "v0 PLAIN with a wrong password")
		lc.waitFor("SASL login failed", "peer="+c.LocalAddr().String(), "mechanism=PLAIN")
	})
}

// TestSASLWithoutUsers: a client that logs in to a broker with no users is
// told so, and clients without SASL are served as before.
func TestSASLWithoutUsers(t *testing.T) {
	in, _ := startLogged(t)
	cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.Plain, "app", "x")), kgo.RequestRetries(0))
	err := ping(cl)
	if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "no users") {
		t.Fatalf("login without users: %v", err)
	}
	if err := ping(client(t, in.Addr())); err != nil {
		t.Fatalf("anonymous client without users: %v", err)
	}
}

func send(t *testing.T, c net.Conn, corr int32, req kmsg.Request) {
	t.Helper()
	if _, err := c.Write(frame(req.Key(), req.GetVersion(), corr, req.AppendTo(nil), req.IsFlexible())); err != nil {
		t.Fatal(err)
	}
}

// receive reads one response; ApiVersions and non-flexible answers have no
// header tags.
func receive(t *testing.T, c net.Conn, corr int32, resp kmsg.Response) kmsg.Response {
	t.Helper()
	body := readToken(t, c)
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != corr {
		t.Fatalf("answer %x does not carry correlation id %d", body, corr)
	}
	body = body[4:]
	if resp.IsFlexible() && resp.Key() != 18 {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decode %s: %v", kmsg.NameForKey(resp.Key()), err)
	}
	return resp
}

func writeToken(t *testing.T, c net.Conn, tok []byte) {
	t.Helper()
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...)); err != nil {
		t.Fatal(err)
	}
}

func readToken(t *testing.T, c net.Conn) []byte {
	t.Helper()
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return b
}
