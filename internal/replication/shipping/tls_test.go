package shipping

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/testcerts"
)

// tlsLeader serves the shipping endpoints over TLS with a test CA's server
// certificate; it returns the host:port and the certificates.
func tlsLeader(t *testing.T, leader *testLeader) (string, *testcerts.Set) {
	t.Helper()
	certs, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Handler(leader, "tok", WithLogger(quiet)))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), certs
}

func startFollower(t *testing.T, cfg FollowerConfig, sink *testSink) *Follower {
	t.Helper()
	cfg.ReplicaID, cfg.Token, cfg.Logger = 2, "tok", quiet
	cfg.MaxWait, cfg.MinBackoff, cfg.MaxBackoff = 200*time.Millisecond, 10*time.Millisecond, 100*time.Millisecond
	f := NewFollower(cfg, sink)
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// TestCopiesOverTLS: with FollowerConfig.TLS a leader given as host:port is
// dialled with https and verified with the CA.
func TestCopiesOverTLS(t *testing.T) {
	leader := newTestLeader(t, 3)
	leader.createTopic("orders", 2, nil)
	leader.produce("orders", 0, 10)
	leader.produce("orders", 1, 3)
	addr, certs := tlsLeader(t, leader)
	sink := newTestSink(t)
	f := startFollower(t, FollowerConfig{TLS: &tls.Config{RootCAs: certs.CAs}}, sink)
	f.SetLeader(1, addr, 3)
	eventually(t, 10*time.Second, "follower in sync over TLS", func() error { return inSync(t, leader, sink) })
	if st := f.Status(); !strings.HasPrefix(st.Leader, "https://") || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
}

// TestTLSMismatchIsNamed: a follower without TLS, or with another CA, gets
// nothing from a TLS leader and its status says why.
func TestTLSMismatchIsNamed(t *testing.T) {
	leader := newTestLeader(t, 3)
	leader.createTopic("orders", 1, nil)
	leader.produce("orders", 0, 5)
	addr, _ := tlsLeader(t, leader)
	other, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tls  *tls.Config
		want string
	}{
		{"plain HTTP", nil, "the leader's replication port serves TLS, this replica sent plain HTTP"},
		{"another CA", &tls.Config{RootCAs: other.CAs}, "certificate signed by unknown authority"},
	} {
		sink := newTestSink(t)
		f := startFollower(t, FollowerConfig{TLS: c.tls}, sink)
		f.SetLeader(1, addr, 3)
		eventually(t, 10*time.Second, c.name, func() error {
			if st := f.Status(); !strings.Contains(st.LastError, c.want) {
				return errors.New("last error " + st.LastError)
			}
			return nil
		})
		if len(sink.Topics()) != 0 {
			t.Fatalf("%s: copied %v", c.name, sink.Topics())
		}
	}
}
