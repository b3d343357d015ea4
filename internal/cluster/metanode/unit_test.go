package metanode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestCommandNeedsOneOperation(t *testing.T) {
	for _, c := range []Command{{}, {DeleteTopic: &DeleteTopic{Name: "a"}, SetConfig: &SetConfig{}}} {
		if err := c.validate(); ErrorCode(err) != kerr.InvalidRequest.Code {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}

func TestRegistrationOnTheLeadersClock(t *testing.T) {
	s := meta.New()
	rec := meta.RegisterBrokerRecord{BrokerID: 4, GroupID: "g", IncarnationID: meta.UUID{1}, ClientAddress: "c", ReplicationAddress: "r", LeaseExpiryMs: 99}
	cmd := Command{RegisterBroker: &RegisterBroker{Record: rec, LeaseMs: 5000}}
	recs, err := cmd.records(s, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[0].(meta.RegisterBrokerRecord).LeaseExpiryMs; got != 6000 {
		t.Fatalf("lease expiry %d, want the leader's now plus the lease", got)
	}
	if err := s.ApplyBatch(recs); err != nil {
		t.Fatal(err)
	}
	// Another incarnation while the lease runs, and after.
	rec.IncarnationID = meta.UUID{2}
	cmd.RegisterBroker.Record = rec
	if _, err := cmd.records(s, 5999); !errors.Is(err, kerr.DuplicateBrokerRegistration) {
		t.Fatalf("new incarnation within the lease: %v", err)
	}
	if _, err := cmd.records(s, 6000); err != nil {
		t.Fatalf("new incarnation after the lease: %v", err)
	}
	cmd.RegisterBroker.LeaseMs = -1
	if _, err := cmd.records(s, 6000); ErrorCode(err) != kerr.InvalidRequest.Code {
		t.Fatalf("negative lease: %v", err)
	}
}

func TestErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int16
	}{
		{nil, 0},
		{&meta.Error{Code: kerr.TopicAlreadyExists}, kerr.TopicAlreadyExists.Code},
		{fmt.Errorf("%w: ctx", ErrNoLeader), kerr.NotController.Code},
		{ErrOutcomeUnknown, kerr.RequestTimedOut.Code},
		{errors.New("other"), kerr.UnknownServerError.Code},
	} {
		if got := ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func testConfig(t *testing.T, id int32) Config {
	return Config{
		ID: id, GroupID: "g", ClientAddress: "c:1", ReplicationAddress: "r:1",
		Voters:  map[int32]string{1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"},
		DataDir: t.TempDir(), Token: "tok", Logger: testLogger(),
	}
}

func TestConfigChecks(t *testing.T) {
	for name, f := range map[string]func(*Config){
		"two voters":        func(c *Config) { delete(c.Voters, 3) },
		"lease too short":   func(c *Config) { c.LeaseInterval, c.LeaseDuration = 2e9, 1e9 },
		"no group":          func(c *Config) { c.GroupID = "" },
		"no data directory": func(c *Config) { c.DataDir = "" },
	} {
		cfg := testConfig(t, 1)
		f(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHandlerChecksTokenAndServesVotersOnly(t *testing.T) {
	v, err := New(testConfig(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(testConfig(t, 9))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(createTopic("t", 1))
	do := func(n *Node, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, ProposePath, bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		n.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := do(v, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", rec.Code)
	}
	// A voter that is not running says so; the forwarder tries again.
	rec := do(v, "tok")
	var a proposeAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); rec.Code != http.StatusOK || err != nil || !a.Retry {
		t.Fatalf("stopped voter: %d %s", rec.Code, rec.Body)
	}
	if rec := do(o, "tok"); rec.Code != http.StatusNotFound {
		t.Fatalf("observer: %d", rec.Code)
	}
	if _, err := v.Propose(context.Background(), createTopic("t", 1)); !errors.Is(err, ErrStopped) {
		t.Fatalf("propose on a node never started: %v", err)
	}
}

func TestObserverRefusesAGap(t *testing.T) {
	o, err := New(testConfig(t, 9))
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := meta.EncodeBatch([]meta.Record{meta.ConfigRecord{ResourceType: meta.ResourceBroker, Name: "k", Value: "v"}})
	err = o.obs.take(pullAnswer{Entries: []pullEntry{{Index: 1}, {Index: 3, Data: batch}}})
	if err == nil || !strings.Contains(err.Error(), "entry 3 after 1") || o.Applied() != 1 {
		t.Fatalf("gap: %v, applied %d", err, o.Applied())
	}
	if err := o.obs.take(pullAnswer{Entries: []pullEntry{{Index: 1}, {Index: 2, Data: batch}, {Index: 3, Data: []byte("junk")}}}); err != nil {
		t.Fatal(err)
	}
	// An entry that does not decode is skipped like a refused one: the
	// index moves, the state does not.
	var v string
	o.Read(func(s *meta.State, applied uint64) {
		v = s.Configs(meta.ResourceBroker, "")["k"]
		if applied != 3 {
			t.Errorf("applied %d", applied)
		}
	})
	if v != "v" {
		t.Fatal("entry 2 not applied")
	}
}
