package app_test

import (
	"crypto/pbkdf2"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

func inDir(dir string) func(*config.Server) { return func(s *config.Server) { s.DataDir = dir } }

// canLogIn reports whether a client logging in with mech gets metadata.
func canLogIn(t *testing.T, addr, mech, user, pass string) bool {
	t.Helper()
	cl := client(t, addr, kgo.SASL(mechanism(mech, user, pass)), kgo.RequestRetries(0))
	err := ping(cl)
	cl.Close()
	if err != nil && !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("%s login of %s: unexpected error %v", mech, user, err)
	}
	return err == nil
}

// described lists "user:mechanism" for every credential DescribeUserSCRAMs
// reports.
func described(t *testing.T, adm *kadm.Client) string {
	t.Helper()
	ds, err := adm.DescribeUserSCRAMs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds.Sorted() {
		if d.Err != nil {
			t.Fatalf("describe %s: %v", d.User, d.Err)
		}
		for _, c := range d.CredInfos {
			out = append(out, fmt.Sprintf("%s:%s:%d", d.User, c.Mechanism, c.Iterations))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestScramCredentialsAtRuntime(t *testing.T) {
	dir := t.TempDir()
	users := withUsers(config.User{Username: "app", Password: "app-secret"})
	in, lc := startLogged(t, inDir(dir), users)
	addr := in.Addr()
	admin := kadm.NewClient(client(t, addr, kgo.SASL(mechanism(auth.ScramSHA512, "app", "app-secret"))))

	if got, want := described(t, admin), "app:SCRAM-SHA-256:4096 app:SCRAM-SHA-512:4096"; got != want {
		t.Fatalf("configured users described as %q, want %q", got, want)
	}
	res, err := admin.AlterUserSCRAMs(ctxT(t),
		[]kadm.DeleteSCRAM{{User: "app", Mechanism: kadm.ScramSha256}},
		[]kadm.UpsertSCRAM{
			{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "alice-1"},
			{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-1"},
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			t.Fatalf("alter %s: %v %s", r.User, r.Err, r.ErrMessage)
		}
	}
	lc.waitFor("user credentials changed", "user=alice", "by=User:app")
	check := func(stage string) {
		t.Helper()
		if got, want := described(t, admin), "alice:SCRAM-SHA-256:4096 alice:SCRAM-SHA-512:8192 app:SCRAM-SHA-512:4096"; got != want {
			t.Fatalf("%s: described %q, want %q", stage, got, want)
		}
		for _, m := range []string{auth.ScramSHA256, auth.ScramSHA512, auth.Plain} {
			if !canLogIn(t, addr, m, "alice", "alice-1") {
				t.Fatalf("%s: alice cannot log in with %s", stage, m)
			}
		}
		if canLogIn(t, addr, auth.ScramSHA256, "app", "app-secret") {
			t.Fatalf("%s: app still logs in with the deleted SCRAM-SHA-256 credential", stage)
		}
		if !canLogIn(t, addr, auth.ScramSHA512, "app", "app-secret") {
			t.Fatalf("%s: app lost its SCRAM-SHA-512 credential", stage)
		}
	}
	check("after the change")

	// The change is rebuilt from __moonmq_users at start, and wins over
	// the configuration, which still lists app with a password. A user
	// added to the configuration later counts at once.
	in.Close()
	in, _ = startLogged(t, inDir(dir), withUsers(config.User{Username: "app", Password: "app-secret"}, config.User{Username: "bob", Password: "bob-1"}))
	addr = in.Addr()
	admin = kadm.NewClient(client(t, addr, kgo.SASL(mechanism(auth.ScramSHA512, "app", "app-secret"))))
	if !canLogIn(t, addr, auth.ScramSHA256, "bob", "bob-1") {
		t.Fatal("a user added to the configuration cannot log in")
	}
	admin.AlterUserSCRAMs(ctxT(t), []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}, {User: "bob", Mechanism: kadm.ScramSha512}}, nil)
	check("after a restart")

	// Rotating a password: the old one stops working.
	if _, err := admin.AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Password: "alice-2"}}); err != nil {
		t.Fatal(err)
	}
	if canLogIn(t, addr, auth.ScramSHA512, "alice", "alice-1") || !canLogIn(t, addr, auth.ScramSHA512, "alice", "alice-2") {
		t.Fatal("password rotation did not take effect")
	}
}

func TestScramCredentialRefusals(t *testing.T) {
	in, _ := startLogged(t, withUsers(config.User{Username: "app", Password: "app-secret"}))
	cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.Plain, "app", "app-secret")))
	salted := func(pw string, salt []byte, iter int) []byte {
		k, _ := pbkdf2.Key(sha256.New, pw, salt, iter, 64)
		return k
	}
	up := func(name string, mech int8, iter int32, saltedLen int) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations, u.Salt = name, mech, iter, []byte("salt")
		// The first 32 bytes are the SHA-256 salted password: PBKDF2's
		// first block does not depend on the length asked for.
		u.SaltedPassword = salted("pw", u.Salt, 4096)[:saltedLen]
		return u
	}
	del := func(name string, mech int8) kmsg.AlterUserSCRAMCredentialsRequestDeletion {
		d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
		d.Name, d.Mechanism = name, mech
		return d
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		up("few-iterations", 1, 100, 32),
		up("no-mechanism", 0, 4096, 32),
		up("short-key", 1, 4096, 16),
		up("", 1, 4096, 32),
		up("twice", 1, 4096, 32), up("twice", 1, 4096, 32),
		up("good", 1, 4096, 32),
		up("half-bad", 1, 4096, 32), up("half-bad", 2, 1_000_000, 64),
	}
	req.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{del("nobody", 2)}
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{"few-iterations": 93, "no-mechanism": 33, "short-key": 93, "": 93, "twice": 92, "good": 0, "half-bad": 93, "nobody": 91}
	got := map[string]int16{}
	for _, r := range resp.Results {
		got[r.User] = r.ErrorCode
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("error codes %v, want %v", got, want)
	}
	// Only "good" was written; half-bad's valid half was not.
	adm := kadm.NewClient(cl)
	ds, err := adm.DescribeUserSCRAMs(ctxT(t), "good", "half-bad", "app")
	if err != nil {
		t.Fatal(err)
	}
	if ds["good"].Err != nil || len(ds["good"].CredInfos) != 1 || !errors.Is(ds["half-bad"].Err, kerr.ResourceNotFound) || ds["app"].Err != nil {
		t.Fatalf("described %+v", ds)
	}
	if !canLogIn(t, in.Addr(), auth.ScramSHA256, "good", "pw") {
		t.Fatal("a user created from a salted password cannot log in")
	}

	// The credentials topic is the broker's: nobody reads or writes it.
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("__moonmq_users")
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctxT(t), cl)
	if err != nil || len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 || !mresp.Topics[0].IsInternal {
		t.Fatalf("metadata of __moonmq_users: %v %+v", err, mresp)
	}
	fetch := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "__moonmq_users", mresp.Topics[0].TopicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fresp, err := fetch.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(fresp.Topics) != 1 || fresp.Topics[0].Partitions[0].ErrorCode != 29 || len(fresp.Topics[0].Partitions[0].RecordBatches) != 0 {
		t.Fatalf("fetch of __moonmq_users answered %+v, want TOPIC_AUTHORIZATION_FAILED", fresp.Topics)
	}
	pcl := client(t, in.Addr(), kgo.SASL(mechanism(auth.Plain, "app", "app-secret")), kgo.RequestRetries(0), kgo.RecordRetries(1))
	if err := pcl.ProduceSync(ctxT(t), &kgo.Record{Topic: "__moonmq_users", Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("a client wrote to __moonmq_users")
	}
	if r, err := adm.DeleteTopics(ctxT(t), "__moonmq_users"); err == nil && r["__moonmq_users"].Err == nil {
		t.Fatal("a client deleted __moonmq_users")
	}
}

// TestFirstUserTurnsLoginOn: creating the first user at runtime makes the
// broker require logins from then on, also from the connection that did it.
func TestFirstUserTurnsLoginOn(t *testing.T) {
	in, lc := startLogged(t)
	cl := client(t, in.Addr(), kgo.RequestRetries(0))
	adm := kadm.NewClient(cl)
	if _, err := adm.AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{{User: "first", Mechanism: kadm.ScramSha256, Password: "pw"}}); err != nil {
		t.Fatal(err)
	}
	lc.waitFor("user credentials changed", "user=first", "by=User:ANONYMOUS")
	if err := ping(cl); err == nil {
		t.Fatal("an anonymous connection still served after the first user was created")
	}
	lc.waitFor("closed client connection", "request before SASL login")
	if !canLogIn(t, in.Addr(), auth.ScramSHA256, "first", "pw") {
		t.Fatal("the first user cannot log in")
	}
}
