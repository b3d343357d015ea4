package app_test

import (
	"crypto/tls"
	"errors"
	"net"
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

type acl struct {
	rt        kmsg.ACLResourceType
	name      string
	pattern   kmsg.ACLResourcePatternType
	principal string
	op        kmsg.ACLOperation
	perm      kmsg.ACLPermissionType
}

func allow(principal string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType) acl {
	return acl{rt, name, pattern, principal, op, kmsg.ACLPermissionTypeAllow}
}

const (
	literal  = kmsg.ACLResourcePatternTypeLiteral
	prefixed = kmsg.ACLResourcePatternTypePrefixed
)

func createACLs(t *testing.T, cl *kgo.Client, acls ...acl) {
	t.Helper()
	req := kmsg.NewPtrCreateACLsRequest()
	for _, a := range acls {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = a.rt, a.name, a.pattern
		c.Principal, c.Host, c.Operation, c.PermissionType = a.principal, "*", a.op, a.perm
		req.Creations = append(req.Creations, c)
	}
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(acls) {
		t.Fatalf("create ACLs: %d results for %d ACLs", len(resp.Results), len(acls))
	}
	for i, r := range resp.Results {
		if r.ErrorCode != 0 {
			t.Fatalf("create ACL %+v: error %d %v", acls[i], r.ErrorCode, r.ErrorMessage)
		}
	}
}

// userClient logs in as a user of the ACL tests (password: the name).
func userClient(t *testing.T, addr, user string, opts ...kgo.Opt) *kgo.Client {
	return client(t, addr, append([]kgo.Opt{kgo.SASL(mechanism(auth.ScramSHA256, user, user+"-pw")), kgo.RequestRetries(0)}, opts...)...)
}

func aclUsers(names ...string) func(*config.Server) {
	return func(s *config.Server) {
		for _, n := range names {
			s.Users = append(s.Users, config.User{Username: n, Password: n + "-pw"})
		}
		s.SuperUsers = []string{"User:admin"}
	}
}

func produceErr(t *testing.T, cl *kgo.Client, topic string) error {
	t.Helper()
	return cl.ProduceSync(ctxT(t), &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
}

func fetchCode(t *testing.T, cl *kgo.Client, topic string) int16 {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 10
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	if mresp, err := meta.RequestWith(ctxT(t), cl); err == nil && len(mresp.Topics) == 1 {
		ft.TopicID = mresp.Topics[0].TopicID
	}
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

func listedTopics(t *testing.T, cl *kgo.Client) string {
	t.Helper()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range resp.Topics {
		names = append(names, *tp.Topic)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func TestACLs(t *testing.T) {
	dir := t.TempDir()
	in, lc := startLogged(t, inDir(dir), aclUsers("admin", "alice", "bob"))
	addr := in.Addr()
	admin := client(t, addr, kgo.SASL(mechanism(auth.ScramSHA256, "admin", "admin-pw")), kgo.AllowAutoTopicCreation())
	for _, topic := range []string{"orders-1", "orders-2", "free"} {
		if err := produceErr(t, admin, topic); err != nil {
			t.Fatal(err)
		}
	}
	createACLs(t, admin,
		allow("User:alice", kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, "orders-", prefixed),
		allow("User:alice", kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, "orders-", prefixed),
		allow("User:alice", kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, "g1", literal),
		allow("User:alice", kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, "tx-", prefixed),
		allow("User:bob", kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, "orders-1", literal),
		// A cluster ACL for someone else: from now on only the ones it
		// names (and super users) may administer the cluster.
		allow("User:ops", kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, "kafka-cluster", literal),
	)
	lc.waitFor("ACL created", "by=User:admin")
	alice := userClient(t, addr, "alice")
	bob := userClient(t, addr, "bob")

	check := func(stage string) {
		t.Helper()
		if err := produceErr(t, alice, "orders-1"); err != nil {
			t.Fatalf("%s: alice writes orders-1: %v", stage, err)
		}
		if err := produceErr(t, bob, "orders-1"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("%s: bob writes orders-1: %v, want TOPIC_AUTHORIZATION_FAILED", stage, err)
		}
		lc.waitFor("authorization denied", "principal=User:bob", "operation=WRITE", "resource=orders-1")
		if c := fetchCode(t, alice, "orders-2"); c != 0 {
			t.Fatalf("%s: alice reads orders-2: error %d", stage, c)
		}
		if c := fetchCode(t, bob, "orders-1"); c != 29 {
			t.Fatalf("%s: bob reads orders-1: error %d, want TOPIC_AUTHORIZATION_FAILED (29)", stage, c)
		}
		// Topics nobody wrote an ACL for stay open (AllowEveryoneIfNoAclFound
		// defaults to true); bob sees the topic he may describe, not the
		// ones only alice may use.
		if got := listedTopics(t, bob); !strings.Contains(got, "free") || !strings.Contains(got, "orders-1") || strings.Contains(got, "orders-2") {
			t.Fatalf("%s: bob's metadata lists %s", stage, got)
		}
		if err := produceErr(t, bob, "free"); err != nil {
			t.Fatalf("%s: bob writes a topic without ACLs: %v", stage, err)
		}
	}
	check("after creating the ACLs")

	// Groups, transactional ids and the cluster.
	join := func(cl *kgo.Client, group string) int16 {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.ProtocolType, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = group, "consumer", 10000, 10000
		req.MemberID = ""
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}}}
		resp, err := req.RequestWith(ctxT(t), cl)
		if errors.Is(err, kerr.GroupAuthorizationFailed) {
			// The client asks FindCoordinator first, which refuses
			// to describe the group already.
			return 30
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	if c := join(alice, "g1"); c != 0 && c != 79 { // 79: MEMBER_ID_REQUIRED, the normal first answer
		t.Fatalf("alice joins g1: error %d", c)
	}
	if c := join(bob, "g1"); c != 30 {
		t.Fatalf("bob joins g1: error %d, want GROUP_AUTHORIZATION_FAILED (30)", c)
	}
	lc.waitFor("authorization denied", "principal=User:bob", "resource_type=GROUP", "resource=g1")
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "g1", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "orders-1"
	ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}
	commit.Topics = append(commit.Topics, ct)
	if resp, err := commit.RequestWith(ctxT(t), alice); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("alice commits for g1: %v %+v", err, resp)
	}
	if resp, err := commit.RequestWith(ctxT(t), bob); !errors.Is(err, kerr.GroupAuthorizationFailed) && (err != nil || resp.Topics[0].Partitions[0].ErrorCode != 30) {
		t.Fatalf("bob commits for g1: %v %+v, want GROUP_AUTHORIZATION_FAILED", err, resp)
	}

	initTxn := func(cl *kgo.Client, id string) int16 {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(id), 10000
		resp, err := req.RequestWith(ctxT(t), cl)
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return 53 // refused at FindCoordinator already
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	if c := initTxn(alice, "tx-1"); c != 0 {
		t.Fatalf("alice inits tx-1: error %d", c)
	}
	if c := initTxn(bob, "tx-1"); c != 53 {
		t.Fatalf("bob inits tx-1: error %d, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)", c)
	}
	// Clients ask FindCoordinator first, which already refuses; the
	// coordinator's own APIs refuse too, for a client that skips it.
	raw := rawLogin(t, addr, "bob", "bob-pw")
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Version, jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = 5, "g1", "consumer", 10000, 10000
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}}}
	send(t, raw, 3, jg)
	if resp := receive(t, raw, 3, &kmsg.JoinGroupResponse{Version: 5}).(*kmsg.JoinGroupResponse); resp.ErrorCode != 30 {
		t.Fatalf("JoinGroup by bob: error %d, want GROUP_AUTHORIZATION_FAILED (30)", resp.ErrorCode)
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version, ip.TransactionalID, ip.TransactionTimeoutMillis = 2, kmsg.StringPtr("tx-1"), 10000
	send(t, raw, 4, ip)
	if resp := receive(t, raw, 4, &kmsg.InitProducerIDResponse{Version: 2}).(*kmsg.InitProducerIDResponse); resp.ErrorCode != 53 {
		t.Fatalf("InitProducerId tx-1 by bob: error %d, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)", resp.ErrorCode)
	}
	ec := kmsg.NewPtrEndTxnRequest()
	ec.Version, ec.TransactionalID, ec.ProducerID, ec.Commit = 2, "tx-1", 1, true
	send(t, raw, 5, ec)
	if resp := receive(t, raw, 5, &kmsg.EndTxnResponse{Version: 2}).(*kmsg.EndTxnResponse); resp.ErrorCode != 53 {
		t.Fatalf("EndTxn tx-1 by bob: error %d, want 53", resp.ErrorCode)
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version, oc.Group, oc.Generation = 7, "g1", -1
	oc.Topics = commit.Topics
	send(t, raw, 6, oc)
	if resp := receive(t, raw, 6, &kmsg.OffsetCommitResponse{Version: 7}).(*kmsg.OffsetCommitResponse); resp.Topics[0].Partitions[0].ErrorCode != 30 {
		t.Fatalf("OffsetCommit for g1 by bob: %+v, want GROUP_AUTHORIZATION_FAILED", resp.Topics)
	}

	// A transactional producer end to end through kgo.
	txp := userClient(t, addr, "alice", kgo.TransactionalID("tx-e2e"), kgo.DefaultProduceTopic("orders-1"))
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := produceErr(t, txp, "orders-1"); err != nil {
		t.Fatalf("alice's transactional produce: %v", err)
	}
	if err := txp.EndTransaction(ctxT(t), kgo.TryCommit); err != nil {
		t.Fatalf("alice's commit: %v", err)
	}

	bobACL := kmsg.NewPtrCreateACLsRequest()
	bobACL.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "free",
		ResourcePatternType: literal, Principal: "User:bob", Host: "*", Operation: kmsg.ACLOperationAll, PermissionType: kmsg.ACLPermissionTypeAllow}}
	if resp, err := bobACL.RequestWith(ctxT(t), bob); err != nil || resp.Results[0].ErrorCode != 31 {
		t.Fatalf("bob creates an ACL: %v %+v, want CLUSTER_AUTHORIZATION_FAILED (31)", err, resp)
	}
	if _, err := kadm.NewClient(bob).DescribeUserSCRAMs(ctxT(t)); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("bob describes users: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	// Straight to the broker: kgo merges a DescribeLogDirs sent to the
	// cluster, and the merge drops the top-level error.
	logDirs, err := bob.DiscoveredBrokers()[0].Request(ctxT(t), kmsg.NewPtrDescribeLogDirsRequest())
	if ld, _ := logDirs.(*kmsg.DescribeLogDirsResponse); err != nil || ld == nil || ld.ErrorCode != 31 || len(ld.Dirs) != 0 {
		t.Fatalf("bob describes log dirs: %v %+v, want CLUSTER_AUTHORIZATION_FAILED (31)", err, logDirs)
	}
	if _, err := kadm.NewClient(bob).CreateTopic(ctxT(t), 1, 1, nil, "orders-3"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob creates a topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// DescribeAcls shows what was created.
	described, err := kadm.NewClient(admin).DescribeACLs(ctxT(t), kadm.NewACLs().Topics().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny).AllowHosts().Allow())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range described {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		n += len(d.Described)
	}
	if n != 3 {
		t.Fatalf("DescribeAcls found %d topic ACLs, want 3: %+v", n, described)
	}

	// The ACLs are rebuilt from __moonmq_acls at start.
	in.Close()
	in, lc = startLogged(t, inDir(dir), aclUsers("admin", "alice", "bob"))
	addr = in.Addr()
	admin = client(t, addr, kgo.SASL(mechanism(auth.ScramSHA256, "admin", "admin-pw")))
	alice, bob = userClient(t, addr, "alice"), userClient(t, addr, "bob")
	check("after a restart")

	// Deleting alice's write ACL takes her right away.
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.StringPtr("orders-"), prefixed
	f.Principal, f.Operation, f.PermissionType = kmsg.StringPtr("User:alice"), kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAny
	del.Filters = append(del.Filters, f)
	dresp, err := del.RequestWith(ctxT(t), admin)
	if err != nil || dresp.Results[0].ErrorCode != 0 || len(dresp.Results[0].MatchingACLs) != 1 {
		t.Fatalf("delete alice's write ACL: %v %+v", err, dresp)
	}
	if err := produceErr(t, alice, "orders-1"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice writes after her ACL was deleted: %v", err)
	}
}

// TestACLDenyByDefault: with AllowEveryoneIfNoAclFound false a resource
// nobody wrote an ACL for is closed to all but super users.
func TestACLDenyByDefault(t *testing.T) {
	in, _ := startLogged(t, aclUsers("admin", "bob"), func(s *config.Server) {
		f := false
		s.AllowEveryoneIfNoAclFound = &f
	})
	admin := client(t, in.Addr(), kgo.SASL(mechanism(auth.ScramSHA256, "admin", "admin-pw")), kgo.AllowAutoTopicCreation())
	for _, topic := range []string{"a", "b"} {
		if err := produceErr(t, admin, topic); err != nil {
			t.Fatalf("super user writes %s: %v", topic, err)
		}
	}
	bob := userClient(t, in.Addr(), "bob")
	if err := produceErr(t, bob, "a"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob writes a: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if got := listedTopics(t, bob); got != "" {
		t.Fatalf("bob's metadata lists %q, want nothing", got)
	}
	createACLs(t, admin, allow("User:bob", kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, "b", literal))
	if err := produceErr(t, bob, "b"); err != nil {
		t.Fatalf("bob writes b after an ACL allows it: %v", err)
	}
	if got := listedTopics(t, bob); got != "b" {
		t.Fatalf("bob's metadata lists %q, want b (WRITE implies DESCRIBE)", got)
	}
	// Idempotent producing needs WRITE on some topic: bob has it.
	idem := userClient(t, in.Addr(), "bob", kgo.DefaultProduceTopic("b"))
	if err := produceErr(t, idem, "b"); err != nil {
		t.Fatalf("bob's idempotent producer: %v", err)
	}
	// Nobody may auto-create a topic without CREATE.
	if err := produceErr(t, bob, "c"); err == nil {
		t.Fatal("bob auto-created a topic without CREATE")
	}
}

// TestACLForCertificatePrincipal: without SASL, a verified client
// certificate names the principal ("User:" + its subject), as on Kafka's
// SSL listeners; a client without one is User:ANONYMOUS.
func TestACLForCertificatePrincipal(t *testing.T) {
	c := certs(t)
	principal := "User:CN=client-app,O=MoonMQ tests"
	in, lc := startLogged(t, func(s *config.Server) {
		s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile}
		f := false
		s.AllowEveryoneIfNoAclFound = &f
		s.SuperUsers = []string{principal}
	})
	withCert := client(t, in.Addr(), kgo.RequestRetries(0), kgo.AllowAutoTopicCreation(),
		kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs, Certificates: []tls.Certificate{c.Client}}))
	if err := produceErr(t, withCert, "t1"); err != nil {
		t.Fatalf("the certificate's principal (a super user) cannot write: %v", err)
	}
	anonymous := client(t, in.Addr(), kgo.RequestRetries(0), kgo.DialTLSConfig(&tls.Config{RootCAs: c.CAs}))
	if err := produceErr(t, anonymous, "t1"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a client without a certificate wrote: %v", err)
	}
	lc.waitFor("authorization denied", "principal=User:ANONYMOUS", "resource=t1")
}

// rawLogin opens a frame-level connection logged in with PLAIN.
func rawLogin(t *testing.T, addr, user, pass string) net.Conn {
	t.Helper()
	c := rawConn(t, addr)
	send(t, c, 1, &kmsg.SASLHandshakeRequest{Version: 1, Mechanism: auth.Plain})
	if resp := receive(t, c, 1, &kmsg.SASLHandshakeResponse{Version: 1}).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatalf("SaslHandshake: error %d", resp.ErrorCode)
	}
	send(t, c, 2, &kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: []byte("\x00" + user + "\x00" + pass)})
	if resp := receive(t, c, 2, &kmsg.SASLAuthenticateResponse{Version: 1}).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != 0 {
		t.Fatalf("SaslAuthenticate: error %d", resp.ErrorCode)
	}
	return c
}
