package interop

// Apache Kafka's own command-line tools, run as their users run them: the
// main classes behind kafka-topics.sh, kafka-configs.sh,
// kafka-console-producer.sh and the others, from the kafka-tools and
// kafka_2.13 artifacts (test/kafkatools, built with Maven), against a
// single node, a 3-replica group bootstrapped with every replica, and the
// same group bootstrapped with one follower only. Each check reads what
// the tool printed, as a user would.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	toolsOnce sync.Once
	toolsCP   string
	toolsWhy  string
)

// kafkaToolsClasspath builds test/kafkatools once and returns its
// classpath.
func kafkaToolsClasspath(t *testing.T) (javaBin, cp string) {
	t.Helper()
	toolsOnce.Do(func() {
		java, err1 := exec.LookPath("java")
		mvn, err2 := exec.LookPath("mvn")
		if err1 != nil || err2 != nil {
			toolsWhy = "java and mvn are needed for Kafka's tools"
			return
		}
		dir, _ := filepath.Abs("../kafkatools")
		cpFile := filepath.Join(dir, "target", "classpath.txt")
		if _, err := os.Stat(cpFile); err != nil {
			out, err := exec.Command(mvn, "-q", "-B", "-f", filepath.Join(dir, "pom.xml"), "compile").CombinedOutput()
			if err != nil {
				toolsWhy = fmt.Sprintf("mvn compile of test/kafkatools: %v\n%s", err, out)
				return
			}
		}
		b, err := os.ReadFile(cpFile)
		if err != nil {
			toolsWhy = err.Error()
			return
		}
		toolsCP = java + "\x00" + strings.TrimSpace(string(b))
	})
	if toolsWhy != "" {
		javaUnavailable(t, "%s", toolsWhy)
	}
	java, cp, _ := strings.Cut(toolsCP, "\x00")
	return java, cp
}

// kafkaTool runs one of Kafka's tools and returns what it printed on
// stdout; a non-zero exit fails the test with both streams.
func kafkaTool(t *testing.T, stdin, main string, args ...string) string {
	t.Helper()
	java, cp := kafkaToolsClasspath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, append([]string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp", cp, main}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", main, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func mustContain(t *testing.T, what, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Fatalf("%s: %q is not in what it printed:\n%s", what, p, out)
		}
	}
}

func mustMatch(t *testing.T, what, out, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(out) {
		t.Fatalf("%s: nothing matches %s in what it printed:\n%s", what, re, out)
	}
}

// TestKafkaTools runs the tools through scenarios single, group and
// follower.
func TestKafkaTools(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and a JVM per command: not in -short")
	}
	for _, sc := range scenarios {
		if sc.kill {
			continue
		}
		t.Run(sc.name, func(t *testing.T) { runKafkaTools(t, sc) })
	}
}

func runKafkaTools(t *testing.T, sc scenario) {
	kafkaToolsClasspath(t)
	c, leader, boot := scenarioCluster(t, sc)
	replicas := len(c.Replicas)
	b := strings.Join(boot, ",")
	const topic, group = "tools", "tools-group"
	rf := fmt.Sprint(replicas)

	// kafka-topics.sh
	out := kafkaTool(t, "", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--create", "--topic", topic,
		"--partitions", "3", "--replication-factor", rf)
	mustContain(t, "kafka-topics --create", out, "Created topic "+topic+".")
	// --alter lists the topics of whichever broker it asks, and a
	// follower copies the leader's topic list within a manifest round.
	waitTopicEverywhere(t, boot, topic)
	out = kafkaTool(t, "", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "4")
	describe := func() string {
		// A follower copies the leader's topic list within a manifest
		// round: a change may take that long to show.
		var out string
		for range 20 {
			out = kafkaTool(t, "", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--describe", "--topic", topic)
			if strings.Contains(out, "PartitionCount: 4") {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		return out
	}
	out = describe()
	mustContain(t, "kafka-topics --describe", out, "Topic: "+topic, "PartitionCount: 4", "ReplicationFactor: "+rf)
	mustMatch(t, "kafka-topics --describe", out, fmt.Sprintf(`Partition: 3\s+Leader: %d\s+Replicas: [0-9,]+\s+Isr: [0-9,]+`, leader.ID))

	// kafka-configs.sh
	out = kafkaTool(t, "", "kafka.admin.ConfigCommand", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
		"--alter", "--add-config", "retention.ms=3600000")
	mustContain(t, "kafka-configs --alter", out, "Completed updating config for topic "+topic+".")
	out = kafkaTool(t, "", "kafka.admin.ConfigCommand", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic, "--describe")
	mustContain(t, "kafka-configs --describe", out, "retention.ms=3600000")

	// kafka-console-producer.sh and kafka-console-consumer.sh (the default
	// producer is idempotent with acks=all).
	kafkaTool(t, "alpha\nbravo\ncharlie\n", "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", b, "--topic", topic)
	out = kafkaTool(t, "", "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", b, "--topic", topic,
		"--from-beginning", "--max-messages", "3", "--group", group, "--timeout-ms", "60000")
	lines := strings.Fields(out)
	sort.Strings(lines)
	if strings.Join(lines, " ") != "alpha bravo charlie" {
		t.Fatalf("kafka-console-consumer printed %q, want alpha, bravo and charlie", out)
	}

	// kafka-consumer-groups.sh --describe and --reset-offsets --execute.
	out = kafkaTool(t, "", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b, "--describe", "--group", group)
	mustMatch(t, "kafka-consumer-groups --describe", out, `GROUP\s+TOPIC\s+PARTITION\s+CURRENT-OFFSET\s+LOG-END-OFFSET\s+LAG`)
	mustMatch(t, "kafka-consumer-groups --describe", out, group+`\s+`+topic+`\s+\d\s+\d+\s+\d+\s+0`)
	out = kafkaTool(t, "", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b, "--reset-offsets",
		"--group", group, "--topic", topic, "--to-earliest", "--execute")
	mustMatch(t, "kafka-consumer-groups --reset-offsets", out, `GROUP\s+TOPIC\s+PARTITION\s+NEW-OFFSET`)
	out = kafkaTool(t, "", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b, "--describe", "--group", group)
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 6 && f[0] == group && f[3] != "0" && f[3] != "-" {
			t.Fatalf("after --reset-offsets --to-earliest a partition is at %s:\n%s", f[3], out)
		}
	}

	// kafka-transactions.sh, after a transaction of franz-go's.
	txp, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("tools-tx"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer txp.Close()
	ctx := context.Background()
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txp.ProduceSync(ctx, &kgo.Record{Value: []byte("in-txn")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	out = kafkaTool(t, "", "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b, "list")
	mustMatch(t, "kafka-transactions list", out, `TransactionalId\s+Coordinator\s+ProducerId\s+TransactionState`)
	mustMatch(t, "kafka-transactions list", out, `tools-tx\s+\d+\s+\d+\s+CompleteCommit`)
	out = kafkaTool(t, "", "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b, "describe", "--transactional-id", "tools-tx")
	mustContain(t, "kafka-transactions describe", out, "CompleteCommit", "tools-tx")

	// kafka-leader-election.sh: the partition is led by its preferred
	// replica (the first Metadata lists) already.
	out = kafkaTool(t, "", "org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", b,
		"--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
	mustContain(t, "kafka-leader-election", out, "Valid replica already elected for partitions "+topic+"-0")

	// kafka-producer-perf-test.sh
	out = kafkaTool(t, "", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "2000", "--record-size", "100",
		"--throughput", "-1", "--producer-props", "bootstrap.servers="+b, "acks=all")
	mustMatch(t, "kafka-producer-perf-test", out, `2000 records sent, [0-9.]+ records/sec`)

	// kafka-verifiable-producer.sh and kafka-verifiable-consumer.sh: JSON
	// events, one per line.
	out = kafkaTool(t, "", "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", b, "--topic", "verifiable",
		"--max-messages", "200", "--acks", "-1")
	if n := strings.Count(out, `"name":"producer_send_success"`); n != 200 {
		t.Fatalf("kafka-verifiable-producer: %d producer_send_success events, want 200:\n%s", n, tailLines(out, 5))
	}
	mustMatch(t, "kafka-verifiable-producer", out, `"name":"tool_data".*"sent":200,"acked":200`)
	out = kafkaTool(t, "", "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", b, "--topic", "verifiable",
		"--group-id", "verifiable-group", "--max-messages", "200", "--reset-policy", "earliest")
	consumed := 0
	for _, m := range regexp.MustCompile(`"name":"records_consumed","count":(\d+)`).FindAllStringSubmatch(out, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		consumed += n
	}
	if consumed != 200 {
		t.Fatalf("kafka-verifiable-consumer consumed %d records, want 200:\n%s", consumed, tailLines(out, 10))
	}
	mustContain(t, "kafka-verifiable-consumer", out, `"name":"offsets_committed"`, `"success":true`)

	// kafka-acls.sh, last: once an ACL exists it is enforced.
	out = kafkaTool(t, "", "org.apache.kafka.tools.AclCommand", "--bootstrap-server", b, "--add", "--allow-principal", "User:alice",
		"--operation", "Read", "--topic", topic)
	mustContain(t, "kafka-acls --add", out, "Adding ACLs for resource", "User:alice")
	out = kafkaTool(t, "", "org.apache.kafka.tools.AclCommand", "--bootstrap-server", b, "--list", "--topic", topic)
	mustMatch(t, "kafka-acls --list", out, `principal=User:alice, host=\*, operation=READ, permissionType=ALLOW`)
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// waitTopicEverywhere waits until every broker in addrs lists topic.
func waitTopicEverywhere(t *testing.T, addrs []string, topic string) {
	t.Helper()
	for _, a := range addrs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(a))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			req := kmsg.NewPtrMetadataRequest()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := cl.SeedBrokers()[0].Request(ctx, req)
			cancel()
			found := false
			if err == nil {
				for _, mt := range resp.(*kmsg.MetadataResponse).Topics {
					found = found || mt.Topic != nil && *mt.Topic == topic && mt.ErrorCode == 0
				}
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				t.Fatalf("broker %s does not list topic %s after 30 s: %v", a, topic, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cl.Close()
	}
}
