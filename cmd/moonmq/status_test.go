package main

// Process tests of the operator commands: `moonmq status` and `moonmq topic`
// run as the binary against broker processes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// moonmq runs the binary with args and returns its exit code, stdout and
// stderr.
func moonmq(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("moonmq %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// until runs `moonmq args` until its stdout matches every pattern, and
// returns that stdout; it fails the test with the last output at the
// deadline. Operator views converge (ISR, lag), so they are polled.
func until(t *testing.T, within time.Duration, args []string, patterns ...string) string {
	t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile(p)
	}
	deadline := time.Now().Add(within)
	for {
		code, out, stderr := moonmq(t, args...)
		missing := ""
		for _, re := range res {
			if !re.MatchString(out) {
				missing = re.String()
				break
			}
		}
		if code == 0 && missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("moonmq %s: exit %d, no match for %q within %v\nstdout:\n%s\nstderr:\n%s",
				strings.Join(args, " "), code, missing, within, out, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStatusAndDescribeFailoverGroup runs three failover-mode replica
// processes and checks what an operator sees: the leader's and a
// follower's status, and the kafka-topics describe line from any replica.
func TestStatusAndDescribeFailoverGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("three broker processes")
	}
	rs := make([]*replicaProc, 3)
	for i := range rs {
		rs[i] = &replicaProc{id: i + 1, port: freePort(t), mport: freePort(t), replicate: freePort(t), dataDir: t.TempDir()}
	}
	for _, r := range rs {
		var peers []string
		for _, o := range rs {
			if o != r {
				peers = append(peers, fmt.Sprintf(`{"Id": %d, "Address": "127.0.0.1:%d", "ClientAddress": "127.0.0.1:%d"}`, o.id, o.replicate, o.port))
			}
		}
		role := "follower"
		if r.id == 1 {
			role = "leader"
		}
		extra := fmt.Sprintf(`, "Replication": {"Enabled": true, "ReplicaId": %d, "Role": %q, "ReplicateHost": "127.0.0.1",
			"ReplicatePort": %d, "ClientAddress": "127.0.0.1:%d", "Token": "tok", "AckTimeout": 5, "IsrLagSeconds": 5,
			"Peers": [%s], "Failover": {"Enabled": true}}`, r.id, role, r.replicate, r.port, strings.Join(peers, ","))
		r.config = writeConfig(t, r.dataDir, r.port, r.mport, extra)
	}
	for _, r := range rs {
		r.p = startProc(t, r.config, r.port, r.mport)
	}
	var leader *replicaProc
	deadline := time.Now().Add(60 * time.Second)
	for leader == nil {
		for _, r := range rs {
			st := r.status(t)
			raft, _ := st["raft"].(map[string]any)
			if st["role"] == "leader" && raft["serving"] == true && raft["has_isr"] == true {
				leader = r
			}
		}
		if leader == nil && time.Now().After(deadline) {
			t.Fatal("no serving leader within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var follower *replicaProc
	for _, r := range rs {
		if r != leader {
			follower = r
			break
		}
	}
	L := leader.id

	const topic = "orders"
	cl := newClient(t, fmt.Sprintf("127.0.0.1:%d", leader.port),
		kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", rs[0].port), fmt.Sprintf("127.0.0.1:%d", rs[1].port), fmt.Sprintf("127.0.0.1:%d", rs[2].port)),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(30*time.Second))
	ctx := context.Background()
	retention := "3600000"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 3, map[string]*string{"retention.ms": &retention}, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := cl.ProduceSync(pctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The leader: serving, every follower in the ISR and caught up (its
	// log ends come from its metrics port, named in the config).
	out := until(t, 60*time.Second, []string{"status", "--config", leader.config},
		fmt.Sprintf(`(?m)^replica %d: leader \(failover mode, serving\)$`, L),
		fmt.Sprintf(`(?m)^leader: +%d, epoch [1-9]`, L),
		`(?m)^ISR: +1,2,3$`,
		`(?m)^raft: +leader, term [1-9][0-9]*, commit index [1-9]`,
		`LAG \(RECORDS\)`)
	for _, r := range rs {
		if r != leader {
			until(t, 60*time.Second, []string{"status", "--config", leader.config}, fmt.Sprintf(`(?m)^  %d +yes +[0-9.]+m?s ago +0$`, r.id))
		}
	}
	t.Logf("leader status:\n%s", out)

	// A follower: following the leader at its replication address.
	out = until(t, 60*time.Second, []string{"status", "--config", follower.config},
		fmt.Sprintf(`(?m)^replica %d: follower \(failover mode\)$`, follower.id),
		fmt.Sprintf(`(?m)^leader: +%d, epoch`, L),
		fmt.Sprintf(`(?m)^raft: +follower, .*, raft leader %d$`, L),
		fmt.Sprintf(`(?m)^following: replica %d at (http://)?127\.0\.0\.1:%d, epoch [1-9][0-9]*; state fetching; [1-9][0-9]* fetches`, L, leader.replicate))
	t.Logf("follower status:\n%s", out)
	if strings.Contains(out, "ERROR") || strings.Contains(out, "not in the ISR") {
		t.Fatalf("a healthy follower reports trouble:\n%s", out)
	}
	code, out, stderr := moonmq(t, "status", "--config", follower.config, "--json")
	var doc map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc["role"] != "follower" || doc["raft"] == nil {
		t.Fatalf("status --json: exit %d\n%s\n%s", code, out, stderr)
	}

	// Without the token the replication port refuses, and the CLI says why.
	code, _, stderr = moonmq(t, "status", "--addr", fmt.Sprintf("127.0.0.1:%d", leader.replicate))
	if code != 1 || !strings.Contains(stderr, "wrong or missing token: pass --token or --config") {
		t.Fatalf("status without token: exit %d, %s", code, stderr)
	}

	// The kafka-topics view, asked of a follower's config (all three client
	// addresses): the follower answers Metadata with the group's leader.
	out = until(t, 60*time.Second, []string{"topic", "describe", "--config", follower.config, topic},
		`(?m)^Topic: orders TopicId: \S+ PartitionCount: 2 ReplicationFactor: 3 Configs: retention\.ms=3600000$`,
		fmt.Sprintf(`(?m)^Topic: orders Partition: 0 Leader: %d Replicas: 1,2,3 Isr: 1,2,3 Epoch: [1-9][0-9]* LogStart: 0 HighWatermark: 5$`, L),
		fmt.Sprintf(`(?m)^Topic: orders Partition: 1 Leader: %d Replicas: 1,2,3 Isr: 1,2,3 Epoch: [1-9][0-9]* LogStart: 0 HighWatermark: 0$`, L))
	t.Logf("describe:\n%s", out)
	code, out, stderr = moonmq(t, "topic", "list", "--bootstrap", fmt.Sprintf("127.0.0.1:%d", follower.port))
	if code != 0 || out != "orders\n" {
		t.Fatalf("topic list: exit %d %q %s", code, out, stderr)
	}
}

// TestStatusSingleNode checks the commands against a broker without
// replication, and against no broker at all.
func TestStatusSingleNode(t *testing.T) {
	port, mport := freePort(t), freePort(t)
	cfg := writeConfig(t, t.TempDir(), port, mport, "")
	p := startProc(t, cfg, port, mport)
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("solo"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "solo"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := moonmq(t, "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "replication: off (no enabled Replication block in "+cfg+")") ||
		!regexp.MustCompile(`(?m)^  solo-0 +0 +3 +3 `).MatchString(out) {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = moonmq(t, "topic", "describe", "--bootstrap", p.addr)
	want := "Topic: solo Partition: 0 Leader: 1 Replicas: 1 Isr: 1 Epoch: 0 LogStart: 0 HighWatermark: 3\n"
	if code != 0 || !strings.HasSuffix(out, want) || !strings.Contains(out, "PartitionCount: 1 ReplicationFactor: 1 Configs:\n") {
		t.Fatalf("describe: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = moonmq(t, "topic", "describe", "--bootstrap", p.addr, "nosuch")
	if code != 1 || !strings.Contains(out, "Topic: nosuch Error: UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("describe nosuch: exit %d\n%s", code, out)
	}

	p.kill9(t)
	code, _, stderr = moonmq(t, "status", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("nothing listens on 127.0.0.1:%d: is the broker running?", mport)) {
		t.Fatalf("status of a dead broker: exit %d, %s", code, stderr)
	}
	code, _, stderr = moonmq(t, "topic", "describe", "--bootstrap", p.addr, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "is the broker running?") {
		t.Fatalf("describe of a dead broker: exit %d, %s", code, stderr)
	}
}
