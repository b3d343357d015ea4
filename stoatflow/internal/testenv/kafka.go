//go:build unix

package testenv

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RequireKafkaEnv names an environment variable that, set to 1, turns
// ApacheKafka's skip (no java, or no mvn to resolve Kafka with) into a
// failure: CI sets it so that the Kafka tests cannot silently stop
// running.
const RequireKafkaEnv = "STOATFLOW_REQUIRE_KAFKA"

// kafkaStartTimeout bounds a Kafka start, JVM warm-up included, on a
// loaded two-core machine.
const kafkaStartTimeout = 90 * time.Second

// kafkaPOM is the Maven project, relative to the stoatflow module root,
// whose `mvn compile` writes Kafka's classpath to target/classpath.txt.
const kafkaPOM = "testdata/kafka"

// Kafka is one Apache Kafka node (KRaft, broker and controller in one
// process) owned by one test.
type Kafka struct {
	addr string
	proc *Process
}

// Bootstrap returns the broker's client address, as bootstrap.servers
// takes it.
func (k *Kafka) Bootstrap() string { return k.addr }

// ApacheKafka starts an Apache Kafka 4.x node on loopback ports, with a
// fresh log directory and cluster id, and returns once a client gets
// Metadata from it. It is killed when the test ends. Without java (or
// without mvn while Kafka's classpath is not yet resolved) the test is
// skipped, or fails if STOATFLOW_REQUIRE_KAFKA=1.
func ApacheKafka(t TB) *Kafka {
	t.Helper()
	java := javaBinary()
	if java == "" {
		missing(t, "java is not installed (nor JAVA_HOME/bin/java)")
		return nil
	}
	cp := kafkaClasspath(t)
	if cp == "" {
		return nil // skipped, for a TB whose Skipf returns
	}

	dir := t.TempDir()
	ports := freePorts(t, 2)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	controller := fmt.Sprintf("127.0.0.1:%d", ports[1])
	props := filepath.Join(dir, "server.properties")
	logPath := filepath.Join(dir, "kafka.log")
	config := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		// A dynamic quorum (KIP-853) of this one controller; the format
		// below has to say so with --standalone.
		"controller.quorum.bootstrap.servers=" + controller,
		"listeners=PLAINTEXT://" + addr + ",CONTROLLER://" + controller,
		"advertised.listeners=PLAINTEXT://" + addr,
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs=" + filepath.Join(dir, "logs"),
		"num.partitions=1",
		"auto.create.topics.enable=true",
		// Internal topics default to three replicas, which one node
		// cannot host: the first consumer group or transaction would wait
		// for ever.
		"offsets.topic.replication.factor=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		// Fifty partitions each (the default) cost seconds to create on
		// first use and buy nothing on one node.
		"offsets.topic.num.partitions=1",
		"transaction.state.log.num.partitions=1",
		// A test's consumer group should not sit out Kafka's 3 s wait for
		// more members.
		"group.initial.rebalance.delay.ms=0",
		"",
	}, "\n")
	if err := os.WriteFile(props, []byte(config), 0o644); err != nil {
		t.Fatalf("testenv: %v", err)
	}

	jvm := []string{"-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-cp", cp}

	// The main class behind kafka-storage.sh. Kafka 4 starts only from a
	// formatted log directory, stamped with the cluster id.
	format, err := spawn("kafka-storage format", java,
		append(jvm, "kafka.tools.StorageTool", "format", "--cluster-id", kafkaClusterID(), "--config", props, "--standalone"),
		nil, dir, logPath)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	exited, err := format.Wait(kafkaStartTimeout)
	if !exited {
		format.Kill()
		t.Fatalf("testenv: kafka-storage format did not finish within %v:\n%s", kafkaStartTimeout, tail(logPath, logTail))
	}
	if err != nil {
		t.Fatalf("testenv: kafka-storage format: %v:\n%s", err, tail(logPath, logTail))
	}

	p, err := spawn("kafka", java, append(jvm, "kafka.Kafka", props), nil, dir, logPath)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p.t = t
	k := &Kafka{addr: addr, proc: p}
	t.Cleanup(func() {
		p.Kill()
		if failed(t) {
			t.Logf("testenv: last %d lines of Kafka's log (%s):\n%s", logTail, logPath, tail(logPath, logTail))
		}
	})
	var why string
	ready := poll(kafkaStartTimeout, func() bool {
		if p.Exited() {
			return true
		}
		if err := metadata(addr, 2*time.Second); err != nil {
			why = err.Error()
			return false
		}
		return true
	})
	if p.Exited() {
		_, err := p.Wait(0)
		t.Fatalf("testenv: Kafka exited while starting (%v):\n%s", err, tail(logPath, logTail))
	}
	if !ready {
		t.Fatalf("testenv: Kafka gave no Metadata within %v (%s):\n%s", kafkaStartTimeout, why, tail(logPath, logTail))
	}
	return k
}

// missing skips the test for want of what reason names, or fails it when
// STOATFLOW_REQUIRE_KAFKA=1.
func missing(t TB, reason string) {
	t.Helper()
	if os.Getenv(RequireKafkaEnv) == "1" {
		t.Fatalf("testenv: cannot run Apache Kafka: %s (and %s=1)", reason, RequireKafkaEnv)
	}
	t.Skipf("testenv: cannot run Apache Kafka: %s", reason)
}

func javaBinary() string {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		if p := filepath.Join(home, "bin", "java"); isExecutable(p) {
			return p
		}
	}
	p, _ := exec.LookPath("java")
	return p
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// kafkaClusterID returns a random cluster id in the form Kafka's
// Uuid.toString has: 16 bytes, URL-safe base64 without padding, not
// starting with '-' (which Kafka's own generator avoids, as it reads as a
// command-line flag).
func kafkaClusterID() string {
	for {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id
		}
	}
}

var kafkaCP struct {
	mu   sync.Mutex
	cp   string
	err  error
	done bool
}

// kafkaClasspath returns the classpath of Kafka's jars, resolving it with
// Maven once per test binary, and only while target/classpath.txt is
// missing or names a jar that is gone.
func kafkaClasspath(t TB) string {
	t.Helper()
	kafkaCP.mu.Lock()
	defer kafkaCP.mu.Unlock()
	if !kafkaCP.done {
		kafkaCP.cp, kafkaCP.err = resolveKafka(t)
		// A skip is not remembered: the next caller decides anew, and so
		// skips (or fails) by its own lights.
		kafkaCP.done = kafkaCP.cp != "" || kafkaCP.err != nil
	}
	if kafkaCP.err != nil {
		t.Fatalf("testenv: %v", kafkaCP.err)
	}
	return kafkaCP.cp
}

// resolveKafka returns the classpath, or an error, or skips t when mvn is
// needed and missing.
func resolveKafka(t TB) (string, error) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, kafkaPOM)
	file := filepath.Join(dir, "target", "classpath.txt")
	if cp, ok := readClasspath(file); ok {
		return cp, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		missing(t, "mvn is not installed and "+file+" does not exist yet")
		return "", nil
	}
	// Test binaries of several packages may resolve at once; Maven
	// writing the file while another reads it would hand out half a
	// classpath.
	unlock, err := lockFile(filepath.Join(dir, "target", ".resolve.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if cp, ok := readClasspath(file); ok {
		return cp, nil
	}
	t.Logf("testenv: resolving Apache Kafka with Maven in %s (the first time downloads it)", dir)
	cmd := exec.Command(mvn, "-q", "-B", "compile")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mvn -q -B compile in %s: %v\n%s", dir, err, tailString(string(out), logTail))
	}
	cp, ok := readClasspath(file)
	if !ok {
		return "", fmt.Errorf("mvn -q -B compile in %s left no usable %s", dir, file)
	}
	return cp, nil
}

// readClasspath reads the classpath file and reports whether every jar it
// names exists (a cleaned Maven repository leaves a stale file behind).
func readClasspath(file string) (string, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", false
	}
	cp := strings.TrimSpace(string(b))
	if cp == "" {
		return "", false
	}
	for _, jar := range filepath.SplitList(cp) {
		if _, err := os.Stat(jar); err != nil {
			return "", false
		}
	}
	return cp, true
}

// lockFile takes an exclusive flock on path, creating it (and its
// directory), and returns its release.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
