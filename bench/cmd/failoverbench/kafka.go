package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaGroup is three Apache Kafka nodes, each broker and KRaft controller
// in one JVM (as bench/kafka.sh starts them), holding the topic with
// replication factor 3 and min.insync.replicas 2. Kafka keeps its
// defaults apart from the listeners and what extra sets; the leader and
// the ISR come from Metadata.
type kafkaGroup struct {
	java, classpath string
	nodes           []*kafkaNode
	adm             *kadm.Client
	admCl           *kgo.Client
}

type kafkaNode struct {
	id          int32
	port, cport int
	dir, props  string
	logf        string
	cmd         *exec.Cmd
}

// kafkaJVM is what kafka-server-start.sh and kafka-run-class.sh give the
// JVM: a 1 GiB heap and G1 with a 20 ms pause goal.
var kafkaJVM = []string{"-Xms1G", "-Xmx1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"}

func newKafkaGroup(java, classpathFile, dir string, extra []string) (*kafkaGroup, error) {
	cp, err := os.ReadFile(classpathFile)
	if err != nil {
		return nil, fmt.Errorf("kafka classpath (bench/kafka.sh writes it): %w", err)
	}
	g := &kafkaGroup{java: java, classpath: strings.TrimSpace(string(cp))}
	var voters []string
	for i := range 3 {
		n := &kafkaNode{id: int32(i + 1), port: freePort(), cport: freePort()}
		n.dir = filepath.Join(dir, fmt.Sprintf("kafka-%d", n.id))
		n.props = filepath.Join(n.dir, "server.properties")
		n.logf = filepath.Join(n.dir, "server.log")
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", n.id, n.cport))
		g.nodes = append(g.nodes, n)
	}
	id := clusterID()
	for _, n := range g.nodes {
		props := append([]string{
			"process.roles=broker,controller",
			fmt.Sprintf("node.id=%d", n.id),
			"controller.quorum.voters=" + strings.Join(voters, ","),
			fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.cport),
			fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d", n.port),
			"controller.listener.names=CONTROLLER",
			"inter.broker.listener.name=PLAINTEXT",
			"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"log.dirs=" + filepath.Join(n.dir, "logs"),
			"default.replication.factor=3",
			"min.insync.replicas=2",
			"offsets.topic.replication.factor=3",
			"transaction.state.log.replication.factor=3",
			"transaction.state.log.min.isr=2",
		}, extra...)
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(n.props, []byte(strings.Join(props, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		format := exec.Command(java, append(append([]string{}, kafkaJVM...), "-cp", g.classpath,
			"kafka.tools.StorageTool", "format", "--cluster-id", id, "--config", n.props)...)
		if out, err := format.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kafka-storage format of node %d: %v\n%s", n.id, err, out)
		}
	}
	// All three at once: a node opens its client port only once the
	// controller quorum, a majority of the three, has formed.
	for _, n := range g.nodes {
		if err := g.spawn(n); err != nil {
			g.stopAll()
			return nil, err
		}
	}
	for _, n := range g.nodes {
		if err := n.waitPort(); err != nil {
			g.stopAll()
			return nil, err
		}
	}
	g.admCl, err = kgo.NewClient(kgo.SeedBrokers(g.seeds()...), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		g.stopAll()
		return nil, err
	}
	g.adm = kadm.NewClient(g.admCl)
	return g, nil
}

// clusterID is a random id as Kafka's Uuid.toString writes it.
func clusterID() string {
	for {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id
		}
	}
}

func (g *kafkaGroup) name() string { return "Apache Kafka" }

func (g *kafkaGroup) seeds() []string {
	var s []string
	for _, n := range g.nodes {
		s = append(s, fmt.Sprintf("127.0.0.1:%d", n.port))
	}
	return s
}

// restart starts node id's JVM and waits until it accepts clients.
func (g *kafkaGroup) restart(id int32) error {
	n := g.nodes[id-1]
	if err := g.spawn(n); err != nil {
		return err
	}
	return n.waitPort()
}

// spawn starts n's JVM.
func (g *kafkaGroup) spawn(n *kafkaNode) error {
	lf, err := os.OpenFile(n.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(g.java, append(append([]string{}, kafkaJVM...), "-cp", g.classpath, "kafka.Kafka", n.props)...)
	n.cmd.Stdout, n.cmd.Stderr = lf, lf
	if err := n.cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	go func() { n.cmd.Wait(); lf.Close() }() // reaps it; kill9 waits on exited
	return nil
}

// waitPort waits until n accepts clients.
func (n *kafkaNode) waitPort() error {
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kafka node %d did not accept clients within 120s (log %s)", n.id, n.logf)
}

func (g *kafkaGroup) kill9(id int32) {
	n := g.nodes[id-1]
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(syscall.SIGKILL)
		for i := 0; i < 100 && syscall.Kill(n.cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// partition reads the topic's partition 0 from Metadata.
// partitions is the topic's partitions as the metadata says now; false
// when it cannot say for every one of them.
func (g *kafkaGroup) partitions() (kadm.PartitionDetails, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	md, err := g.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, false
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil || len(t.Partitions) != int(numPartitions) {
		return nil, false
	}
	for _, p := range t.Partitions {
		if p.Err != nil {
			return nil, false
		}
	}
	return t.Partitions, true
}

// leaderNow is the node leading every partition, as the topic's replica
// assignment (the same list for all) keeps it: a failover moves them all
// to the next replica in the list. 0 while they are split or leaderless.
func (g *kafkaGroup) leaderNow(not int32) int32 {
	ps, ok := g.partitions()
	if !ok {
		return 0
	}
	var l int32 = -1
	for _, p := range ps {
		if p.Leader < 0 || p.Leader == not || l >= 0 && p.Leader != l {
			return 0
		}
		l = p.Leader
	}
	return max(l, 0)
}

func (g *kafkaGroup) rejoined(id int32) bool {
	ps, ok := g.partitions()
	if !ok {
		return false
	}
	for _, p := range ps {
		if len(p.ISR) != 3 || p.Leader < 0 {
			return false
		}
	}
	return true
}

// createTopic creates the topic with every partition's replicas in the
// same order, so that one broker leads them all, as MoonMQ's group leader
// does.
func (g *kafkaGroup) createTopic(ctx context.Context, cl *kgo.Client, partitions int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, -1, -1
	for p := range partitions {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition, a.Replicas = p, []int32{1, 2, 3}
		t.ReplicaAssignment = append(t.ReplicaAssignment, a)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("CreateTopics answered %d topics", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && err != kerr.TopicAlreadyExists {
		return err
	}
	return nil
}

func (g *kafkaGroup) elections() (uint64, bool) { return 0, false }

func (g *kafkaGroup) stopAll() {
	if g.admCl != nil {
		g.admCl.Close()
	}
	for _, n := range g.nodes {
		g.kill9(n.id)
	}
}
