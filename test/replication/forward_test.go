package replication_test

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/internal/config"
)

// TestFollowerForwardsToLeader: the requests clients send to any broker
// and that need the leader's state (InitProducerId without a
// transactional id, topic and config changes, ACLs and SCRAM users) are
// answered by a follower with the leader's answer, sent straight to the
// follower over TCP; each one's effect is then seen on the leader.
func TestFollowerForwardsToLeader(t *testing.T) {
	_, leader, follower := leaderAndFollower(t)
	ctx := context.Background()
	cl := client(t, follower.addr())
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	send := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := cl.Broker(follower.id).Request(rctx, req)
		if err != nil {
			t.Fatalf("%s to follower %d: %v", kmsg.NameForKey(req.Key()), follower.id, err)
		}
		return resp
	}
	ok := func(what string, code int16) {
		t.Helper()
		if err := kerr.ErrorForCode(code); err != nil {
			t.Fatalf("%s through follower %d: %v", what, follower.id, err)
		}
	}

	// A retriable answer is retried, as every client does: on a loaded
	// machine the group may shrink its ISR below min.insync.replicas for
	// a moment while the followers create __producer_ids, and the
	// leader then rightly answers COORDINATOR_NOT_AVAILABLE.
	var ipr *kmsg.InitProducerIDResponse
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ipr = send(kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
		if err := kerr.ErrorForCode(ipr.ErrorCode); err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) {
			break
		}
	}
	ok("InitProducerId", ipr.ErrorCode)
	if ipr.ProducerID < 0 {
		t.Fatalf("InitProducerId through the follower: producer id %d", ipr.ProducerID)
	}

	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis = 10000
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "fwd", NumPartitions: 1, ReplicationFactor: 3}}
	ok("CreateTopics", send(ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode)

	// Auto-creation through a follower: only the leader creates topics,
	// so a Metadata request naming a missing topic goes to it.
	auto := client(t, follower.addr(), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("auto-fwd"))
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	if err := auto.ProduceSync(pctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to a new topic through the follower: %v", err)
	}
	pcancel()

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis = 10000
	cp.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "fwd", Count: 2}}
	ok("CreatePartitions", send(cp).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode)

	ac := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ac.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "fwd",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpSet, Value: kmsg.StringPtr("3600000")}}}}
	ok("IncrementalAlterConfigs", send(ac).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode)

	// The leader has every change.
	adm := kadm.NewClient(client(t, leader.addr()))
	td, err := adm.ListTopics(ctx, "fwd")
	if err != nil || td["fwd"].Err != nil || len(td["fwd"].Partitions) != 2 {
		t.Fatalf("the leader's view of the forwarded topic: %v %+v", err, td["fwd"])
	}
	// (kadm asks any broker: a follower shows it once it copied it.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc, err := adm.DescribeTopicConfigs(ctx, "fwd")
		if err == nil {
			if c, err := rc.On("fwd", nil); err == nil && hasConfig(c, "retention.ms", "3600000") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forwarded config change is not seen: %v %+v", err, rc)
		}
		time.Sleep(100 * time.Millisecond)
	}

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TimeoutMillis = 10000
	dt.TopicNames = []string{"fwd"}
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("fwd")}}
	ok("DeleteTopics", send(dt).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode)

	// Metadata names the leader as controller, so admin clients that go to
	// the controller go straight to it.
	md := send(kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse)
	if int(md.ControllerID) != leader.id {
		t.Fatalf("follower's Metadata names controller %d, want the leader %d", md.ControllerID, leader.id)
	}
	ca := kmsg.NewPtrCreateACLsRequest()
	// Once an ACL exists it is enforced: this one keeps the anonymous
	// test client allowed everything.
	ca.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: kmsg.ACLResourceTypeCluster, ResourceName: "kafka-cluster",
		ResourcePatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: "User:ANONYMOUS", Host: "*",
		Operation: kmsg.ACLOperationAll, PermissionType: kmsg.ACLPermissionTypeAllow}}
	ok("CreateAcls", send(ca).(*kmsg.CreateACLsResponse).Results[0].ErrorCode)

	da := kmsg.NewPtrDescribeACLsRequest()
	da.ResourceType, da.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	da.Operation, da.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	dar := send(da).(*kmsg.DescribeACLsResponse)
	ok("DescribeAcls", dar.ErrorCode)
	if len(dar.Resources) != 1 {
		t.Fatalf("DescribeAcls through the follower right after CreateAcls: %d resources, want 1 (the leader's view)", len(dar.Resources))
	}

	// Last: once a SCRAM user exists, every client must log in.
	salt := []byte("salt-salt-salt")
	salted, err := pbkdf2.Key(sha256.New, "pw", salt, 4096, 32)
	if err != nil {
		t.Fatal(err)
	}
	us := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	us.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{{Name: "alice", Mechanism: 1, Iterations: 4096,
		Salt: salt, SaltedPassword: salted}}
	ok("AlterUserScramCredentials", send(us).(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0].ErrorCode)
	// The leader has the user: alice logs in there.
	login := client(t, leader.addr(), kgo.SASL(scram.Auth{User: "alice", Pass: "pw"}.AsSha256Mechanism()))
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, err := kadm.NewClient(login).ListBrokers(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice, created through the follower, cannot log in to the leader: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaderAndFollower starts a failover group and returns it, its serving
// leader (with an ISR committed) and one follower.
func leaderAndFollower(t *testing.T) ([]*node, *node, *node) {
	t.Helper()
	return leaderAndFollowerWith(t, nil)
}

// leaderAndFollowerWith is leaderAndFollower with edit applied to every
// replica's config.
func leaderAndFollowerWith(t *testing.T, edit func(*config.Server)) ([]*node, *node, *node) {
	t.Helper()
	ns, _ := failoverGroupWith(t, edit)
	leader := servingLeader(t, ns, 0, 60*time.Second)
	waitISRCommitted(t, leader)
	follower := ns[0]
	if follower == leader {
		follower = ns[1]
	}
	return ns, leader, follower
}

func hasConfig(r kadm.ResourceConfig, name, value string) bool {
	for _, c := range r.Configs {
		if c.Key == name && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}

// TestFollowerForwardFailsRetriably: with the leader gone and no new one,
// a forwarded request ends, within the forwarding deadline, in an error
// the client retries (COORDINATOR_NOT_AVAILABLE for InitProducerId,
// NOT_CONTROLLER or REQUEST_TIMED_OUT for admin changes), never a hang.
func TestFollowerForwardFailsRetriably(t *testing.T) {
	ns, _ := failoverGroup(t)
	ctx := context.Background()
	leader := servingLeader(t, ns, 0, 60*time.Second)
	waitISRCommitted(t, leader)
	var rest []*node
	for _, n := range ns {
		if n != leader {
			rest = append(rest, n)
		}
	}
	follower := rest[0]
	cl := client(t, follower.addr())
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// Two of three down: no majority, no leader.
	leader.stop()
	rest[1].stop()
	time.Sleep(500 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The follower may have led for a moment between the two stops and
	// closed its client connections when it stepped down: a client
	// reconnects and asks again.
	request := func(req kmsg.Request) (kmsg.Response, error) {
		var resp kmsg.Response
		var err error
		for range 5 {
			if resp, err = cl.Broker(follower.id).Request(rctx, req); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		return resp, err
	}
	start := time.Now()
	resp, err := request(kmsg.NewPtrInitProducerIDRequest())
	if err != nil {
		t.Fatal(err)
	}
	if got := kerr.ErrorForCode(resp.(*kmsg.InitProducerIDResponse).ErrorCode); !errors.Is(got, kerr.CoordinatorNotAvailable) {
		t.Fatalf("InitProducerId with no leader: %v, want COORDINATOR_NOT_AVAILABLE", got)
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "x", NumPartitions: 1, ReplicationFactor: 3}}
	resp, err = request(ct)
	if err != nil {
		t.Fatal(err)
	}
	if got := kerr.ErrorForCode(resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode); !errors.Is(got, kerr.NotController) && !errors.Is(got, kerr.RequestTimedOut) {
		t.Fatalf("CreateTopics with no leader: %v, want NOT_CONTROLLER or REQUEST_TIMED_OUT", got)
	}
	t.Logf("two answers with no leader in %v", time.Since(start))
}

// TestLibrdkafkaIdempotentThroughFollower: an idempotent librdkafka
// producer whose bootstrap list names one follower only (a Kubernetes
// Service in front of the replicas) delivers every record. It delivered
// none in 20 s when followers refused InitProducerId.
func TestLibrdkafkaIdempotentThroughFollower(t *testing.T) {
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		if os.Getenv("MOONMQ_REQUIRE_LIBRDKAFKA") == "1" {
			t.Fatalf("MOONMQ_REQUIRE_LIBRDKAFKA=1 but %s cannot import confluent_kafka: %s", py, out)
		}
		t.Skipf("%s cannot import confluent_kafka (apt-get install python3-confluent-kafka)", py)
	}
	_, leader, follower := leaderAndFollower(t)
	ctx := context.Background()
	const topic, n = "rdk-follower", 200
	if _, err := kadm.NewClient(client(t, leader.addr())).CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, py, "testdata/rdkafka_idempotent.py", follower.addr(), topic, strconv.Itoa(n), "30")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if err := cmd.Run(); err != nil {
		t.Fatalf("rdkafka_idempotent.py: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var sum struct {
		Delivered, Undelivered int
		Errors                 []string
		Librdkafka             string
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("bad summary %q: %v", stdout.String(), err)
	}
	if sum.Delivered != n {
		t.Fatalf("librdkafka %s bootstrapped with follower %d delivered %d of %d records (errors: %v)", sum.Librdkafka, follower.id, sum.Delivered, n, sum.Errors)
	}
	// Exactly once each, on the leader.
	cons := client(t, leader.addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	for len(seen) < n && rctx.Err() == nil {
		cons.PollFetches(rctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for i := range n {
		if v := fmt.Sprintf("v%d", i); seen[v] != 1 {
			t.Fatalf("record %s stored %d times", v, seen[v])
		}
	}
}

// TestForwardNeedsAnAuthenticatedLink: without a Token (or mutual TLS)
// the replication port proves nothing about its callers, so a follower
// does not forward an authenticated client's request (the leader could
// not trust the principal it names) and answers the retriable refusal
// instead; the same request sent to the leader works.
func TestForwardNeedsAnAuthenticatedLink(t *testing.T) {
	_, leader, follower := leaderAndFollowerWith(t, func(c *config.Server) {
		c.Replication.Token = ""
		c.Users = []config.User{{Username: "admin", Password: "admin-pw"}}
		c.SuperUsers = []string{"User:admin"}
	})
	ctx := context.Background()
	asAdmin := kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha512Mechanism())
	create := func(n *node, topic string) int16 {
		t.Helper()
		cl := client(t, n.addr(), asAdmin)
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
			t.Fatal(err)
		}
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.TimeoutMillis = 10000
		ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: topic, NumPartitions: 1, ReplicationFactor: 3}}
		resp, err := cl.Broker(n.id).Request(ctx, ct)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
	}
	if code := create(follower, "via-follower"); code != kerr.NotController.Code {
		t.Fatalf("CreateTopics by a SASL user through a follower without a Token: %v, want NOT_CONTROLLER (not forwarded)", kerr.ErrorForCode(code))
	}
	if code := create(leader, "on-leader"); code != 0 {
		t.Fatalf("CreateTopics on the leader: %v", kerr.ErrorForCode(code))
	}
}
