package app_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestUsersAndACLsReplicate: credentials and ACLs changed on a static-mode
// leader reach its follower through the replicated internal topics, and
// the follower checks logins and ACLs with them.
func TestUsersAndACLsReplicate(t *testing.T) {
	type node struct {
		cfg config.Server
		in  *app.Instance
	}
	ns := make([]*node, 2)
	for i := range ns {
		cfg := config.Default()
		cfg.Host, cfg.Port, cfg.MetricsPort, cfg.DataDir = "127.0.0.1", freeLoopbackPort(t), 0, t.TempDir()
		cfg.Users = []config.User{{Username: "admin", Password: "admin-pw"}}
		cfg.SuperUsers = []string{"User:admin"}
		cfg.Replication = &config.Replication{Enabled: true, ReplicaId: i + 1, Role: "follower",
			ReplicateHost: "127.0.0.1", ReplicatePort: freeLoopbackPort(t), Token: "t", AckTimeout: 5}
		if i == 0 {
			cfg.Replication.Role = "leader"
		}
		ns[i] = &node{cfg: cfg}
	}
	for i, n := range ns {
		o := ns[1-i]
		n.cfg.Replication.ClientAddress = n.cfg.ClientListenAddr()
		n.cfg.Replication.Peers = []config.Peer{{Id: 2 - i, Address: fmt.Sprintf("127.0.0.1:%d", o.cfg.Replication.ReplicatePort), ClientAddress: o.cfg.ClientListenAddr()}}
		if err := n.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	lc := &logCapture{t: t}
	t.Cleanup(func() { lc.mu.Lock(); lc.done = true; lc.mu.Unlock() })
	for i, n := range ns {
		in, err := app.Start(n.cfg, slog.New(slog.NewTextHandler(lc, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", i+1))
		if err != nil {
			t.Fatal(err)
		}
		n.in = in
	}
	t.Cleanup(func() { ns[1].in.Close(); ns[0].in.Close() })
	leader, follower := ns[0].cfg.ClientListenAddr(), ns[1].cfg.ClientListenAddr()

	admin := client(t, leader, kgo.SASL(mechanism(auth.ScramSHA512, "admin", "admin-pw")))
	if _, err := kadm.NewClient(admin).AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha256, Password: "carol-pw"}}); err != nil {
		t.Fatal(err)
	}
	// A follower forwards changes to the leader (clients send CreateAcls
	// to any broker) and relays its answer; the leader takes them too.
	wildcard := kmsg.NewPtrCreateACLsRequest()
	wildcard.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "*",
		ResourcePatternType: literal, Principal: "User:someone-else", Host: "*", Operation: kmsg.ACLOperationDescribe, PermissionType: kmsg.ACLPermissionTypeAllow}}
	for _, id := range []int{2, 1} {
		resp, err := admin.Broker(id).Request(ctxT(t), wildcard)
		if err != nil {
			t.Fatal(err)
		}
		res := resp.(*kmsg.CreateACLsResponse).Results
		if len(res) != 1 || res[0].ErrorCode != 0 {
			t.Fatalf("CreateAcls on replica %d: %+v, want success", id, res)
		}
	}

	// The follower answers Metadata itself: carol may log in there once
	// the users topic has arrived, and then sees no topic (the wildcard
	// ACL names only someone else).
	deadline := time.Now().Add(60 * time.Second)
	for {
		cl := client(t, follower, kgo.SASL(mechanism(auth.ScramSHA256, "carol", "carol-pw")), kgo.RequestRetries(0))
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctxT(t), cl)
		cl.Close()
		if err == nil && len(resp.Topics) == 0 {
			break
		}
		if err != nil && !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("metadata from the follower: %v", err)
		}
		if time.Now().After(deadline) {
			var names []string
			if resp != nil {
				for _, tp := range resp.Topics {
					names = append(names, *tp.Topic)
				}
			}
			t.Fatalf("after 60 s the follower still refuses carol (%v) or shows her topics %s", err, strings.Join(names, ","))
		}
		time.Sleep(100 * time.Millisecond)
	}
	lc.waitFor("client logged in", "replica=2", "user=carol")

	// A forwarded request is judged as the client that sent it: carol may
	// not change ACLs (the cluster has an ACL, none for her), through the
	// follower (whose own link to the leader could) as little as on the
	// leader.
	clusterACL := kmsg.NewPtrCreateACLsRequest()
	clusterACL.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: kmsg.ACLResourceTypeCluster, ResourceName: "kafka-cluster",
		ResourcePatternType: literal, Principal: "User:someone-else", Host: "*", Operation: kmsg.ACLOperationAlter, PermissionType: kmsg.ACLPermissionTypeAllow}}
	if resp, err := admin.Broker(1).Request(ctxT(t), clusterACL); err != nil || resp.(*kmsg.CreateACLsResponse).Results[0].ErrorCode != 0 {
		t.Fatalf("cluster ACL: %v %+v", err, resp)
	}
	asCarol := client(t, follower, kgo.SASL(mechanism(auth.ScramSHA256, "carol", "carol-pw")))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctxT(t), asCarol); err != nil {
		t.Fatal(err)
	}
	resp, err := asCarol.Broker(2).Request(ctxT(t), wildcard)
	if err != nil {
		t.Fatal(err)
	}
	if res := resp.(*kmsg.CreateACLsResponse).Results; len(res) != 1 || res[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("carol's CreateAcls through the follower: %+v, want CLUSTER_AUTHORIZATION_FAILED", res)
	}
	lc.waitFor("forwarded", "replica=1", "User:carol")

	// Reads are answered by the follower from its copy.
	onFollower := client(t, follower, kgo.SASL(mechanism(auth.ScramSHA512, "admin", "admin-pw")))
	users, err := kadm.NewClient(onFollower).DescribeUserSCRAMs(ctxT(t), "carol")
	if err != nil || users["carol"].Err != nil || len(users["carol"].CredInfos) != 1 {
		t.Fatalf("DescribeUserScramCredentials on the follower: %v %+v", err, users)
	}
	dreq := kmsg.NewPtrDescribeACLsRequest()
	dreq.ResourceType, dreq.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	dreq.Operation, dreq.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	dresp, err := onFollower.Broker(2).Request(ctxT(t), dreq)
	if err != nil || dresp.(*kmsg.DescribeACLsResponse).ErrorCode != 0 || len(dresp.(*kmsg.DescribeACLsResponse).Resources) != 2 {
		t.Fatalf("DescribeAcls on the follower: %v %+v", err, dresp)
	}
}
