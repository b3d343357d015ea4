package interop

// The Apache Kafka Java client (org.apache.kafka:kafka-clients), through the
// Maven project in test/java, against an in-process broker.
//
// The project is built once per test binary, offline first (mvn -o, when
// the local Maven repository already holds everything) and online
// otherwise. MOONMQ_JAVA_CLASSPATH, if set, replaces Maven: the sources are
// compiled with javac against that classpath (kafka-clients and its
// dependencies, plus an slf4j binding), which lets a machine without a
// Maven registry run the test with jars it has.
//
// Without java, or without mvn (or a classpath), or when Maven cannot
// resolve the dependencies, the test skips, unless MOONMQ_REQUIRE_JAVA=1,
// which makes all of those failures. MOONMQ_JAVA_DEBUG=1 turns on the
// client's debug log (every request and response), shown with -v.
// MOONMQ_MAVEN_ARGS adds arguments to mvn, such as -Dkafka.version=4.4.0.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// javaSummary is the JSON line JavaClientCheck prints last.
type javaSummary struct {
	Client string            `json:"client"`
	Java   string            `json:"java"`
	Checks map[string]string `json:"checks"`
	Notes  map[string]string `json:"notes"`
	Passed int               `json:"passed"`
	Failed int               `json:"failed"`
}

// javaChecks are the checks JavaClientCheck must report, each "ok".
var javaChecks = []string{
	"admin", "produce_all_codecs", "group_consume_commit",
	"group_second_consumer", "transactions", "fencing",
}

func javaUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("MOONMQ_REQUIRE_JAVA") == "1" {
		t.Fatalf("MOONMQ_REQUIRE_JAVA=1 but %s", msg)
	}
	t.Skip(msg)
}

type javaBuild struct {
	java, classpath string
	unavailable     string // why the test cannot run here
	err             error  // a build that should have worked and did not
}

var (
	javaBuildOnce sync.Once
	javaBuilt     javaBuild
)

// javaProject builds test/java once and returns the java binary and the
// classpath to run JavaClientCheck with.
func javaProject(t *testing.T) (javaBin, classpath string) {
	t.Helper()
	javaBuildOnce.Do(func() { javaBuilt = buildJavaProject() })
	b := javaBuilt
	if b.unavailable != "" {
		javaUnavailable(t, "%s", b.unavailable)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.java, b.classpath
}

func javaTool(name string) (string, bool) {
	if home := os.Getenv("JAVA_HOME"); home != "" && name != "mvn" {
		if p := filepath.Join(home, "bin", name); fileExists(p) {
			return p, true
		}
	}
	p, err := exec.LookPath(name)
	return p, err == nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func buildJavaProject() javaBuild {
	java, ok := javaTool("java")
	if !ok {
		return javaBuild{unavailable: "no java (apt-get install default-jdk-headless maven)"}
	}
	proj, err := filepath.Abs("../java")
	if err != nil {
		return javaBuild{err: err}
	}
	sources, _ := filepath.Glob(filepath.Join(proj, "src/main/java/io/moonmq/interop/*.java"))
	if len(sources) == 0 {
		return javaBuild{err: fmt.Errorf("no Java sources under %s", proj)}
	}
	resources := filepath.Join(proj, "src/main/resources")

	if cp := os.Getenv("MOONMQ_JAVA_CLASSPATH"); cp != "" {
		javac, ok := javaTool("javac")
		if !ok {
			return javaBuild{unavailable: "MOONMQ_JAVA_CLASSPATH is set but there is no javac"}
		}
		out, err := os.MkdirTemp("", "moonmq-java-")
		if err != nil {
			return javaBuild{err: err}
		}
		args := append([]string{"-nowarn", "-d", out, "-cp", cp}, sources...)
		if b, err := exec.Command(javac, args...).CombinedOutput(); err != nil {
			return javaBuild{err: fmt.Errorf("javac against MOONMQ_JAVA_CLASSPATH: %v\n%s", err, b)}
		}
		return javaBuild{java: java, classpath: strings.Join([]string{out, resources, cp}, string(os.PathListSeparator))}
	}

	mvn, ok := javaTool("mvn")
	if !ok {
		return javaBuild{unavailable: "no mvn (apt-get install maven), and MOONMQ_JAVA_CLASSPATH is not set"}
	}
	cpFile := filepath.Join(proj, "target", "classpath.txt")
	goals := []string{"-q", "-B", "compile"} // the pom writes target/classpath.txt in this phase
	if props := os.Getenv("MOONMQ_MAVEN_ARGS"); props != "" {
		goals = append(strings.Fields(props), goals...)
	}
	run := func(extra ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, mvn, append(extra, goals...)...)
		cmd.Dir = proj
		return cmd.CombinedOutput()
	}
	// Offline first: quick, and no registry needed once the repository is warm.
	if _, err := run("-o"); err != nil {
		// -U: retry what an earlier run without a registry recorded as missing.
		if out, err := run("-U"); err != nil {
			tail := string(out)
			if len(tail) > 4000 {
				tail = "..." + tail[len(tail)-4000:]
			}
			if javaResolveFailure(tail) {
				return javaBuild{unavailable: "Maven could not fetch kafka-clients or its plugins (is a Maven registry reachable?):\n" + tail}
			}
			return javaBuild{err: fmt.Errorf("mvn build of %s: %v\n%s", proj, err, tail)}
		}
	}
	deps, err := os.ReadFile(cpFile)
	if err != nil {
		return javaBuild{err: err}
	}
	return javaBuild{java: java, classpath: filepath.Join(proj, "target", "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))}
}

// TestJavaClient runs JavaClientCheck: admin calls, the default (idempotent,
// acks=all) producer with every codec, a classic consumer group with
// commits, transactions committed and aborted with offsets in them, read
// by read_committed and read_uncommitted consumers, and fencing by a second
// producer with the same transactional.id. It also reports, without
// checking it, what a group.protocol=consumer (KIP-848) consumer does.
// Then franz-go checks the same state from outside.
func TestJavaClient(t *testing.T) {
	javaBin, cp := javaProject(t)
	in := startBroker(t)
	addr := in.Addr()

	level := "warn"
	if os.Getenv("MOONMQ_JAVA_DEBUG") == "1" {
		level = "debug"
	}
	ctx := ctxTimeout(t, 5*time.Minute)
	cmd := exec.CommandContext(ctx, javaBin,
		"-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel="+level,
		"-Dmoonmq.deadline.ms=240000",
		"-cp", cp, "io.moonmq.interop.JavaClientCheck", addr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("JavaClientCheck took %v", time.Since(start).Round(time.Millisecond))
	if stderr.Len() > 0 {
		t.Logf("JavaClientCheck stderr:\n%s", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var sum javaSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("JavaClientCheck (%v) printed no summary: %v\nstdout:\n%s", runErr, err, stdout.String())
	}
	t.Logf("%s on Java %s: %d passed, %d failed", sum.Client, sum.Java, sum.Passed, sum.Failed)
	notes := make([]string, 0, len(sum.Notes))
	for k, v := range sum.Notes {
		notes = append(notes, k+": "+v)
	}
	sort.Strings(notes)
	for _, n := range notes {
		t.Logf("note %s", n)
	}
	for _, c := range javaChecks {
		if r, ok := sum.Checks[c]; !ok {
			t.Errorf("check %s: not reported", c)
		} else if r != "ok" {
			t.Errorf("check %s: %s", c, r)
		}
	}
	for c, r := range sum.Checks {
		if r != "ok" && !javaKnownCheck(c) {
			t.Errorf("check %s: %s", c, r)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("JavaClientCheck: %v, though every check passed", runErr)
	}
	if t.Failed() {
		return
	}

	// The same state seen through franz-go.
	adm := kadm.NewClient(franz(t, addr))
	actx := ctxTimeout(t, 30*time.Second)
	ends, err := adm.ListEndOffsets(actx, "java-rt")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	group, err := adm.FetchOffsets(actx, "java-group")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		end, ok := ends.Lookup("java-rt", p)
		if !ok || end.Err != nil {
			t.Fatalf("end offset of java-rt/%d: %v", p, end.Err)
		}
		total += end.Offset
		c, ok := group.Lookup("java-rt", p)
		if !ok || c.Err != nil || c.At != end.Offset {
			t.Errorf("java-group committed java-rt/%d = %+v, want the end offset %d", p, c, end.Offset)
		}
	}
	if total != 330 {
		t.Errorf("java-rt holds %d records, want 300 + 30", total)
	}
	txnGroup, err := adm.FetchOffsets(actx, "java-txn-offsets")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := txnGroup.Lookup("java-rt", 0); !ok || c.Err != nil || c.At != 5 {
		t.Errorf("java-txn-offsets committed java-rt/0 = %+v, want 5 (from the committed transaction, not 9 from the aborted one)", c)
	}

	var want []string
	for _, r := range []struct {
		prefix string
		n      int
	}{{"commit-", 30}, {"commit2-", 15}, {"after-fence-", 10}} {
		for i := 0; i < r.n; i++ {
			want = append(want, fmt.Sprintf("%s%d", r.prefix, i))
		}
	}
	cl := franz(t, addr, kgo.ConsumeTopics("java-txn"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []string
	pctx := ctxTimeout(t, 20*time.Second)
	for len(got) < len(want) && pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Key)) })
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("franz-go read_committed on java-txn: got %d records %v, want %d %v", len(got), got, len(want), want)
	}
}

func javaKnownCheck(name string) bool {
	for _, c := range javaChecks {
		if c == name {
			return true
		}
	}
	return false
}

// javaResolveFailure tells whether Maven failed for want of a registry
// (nothing to fetch kafka-clients or a plugin from), as opposed to a broken
// build.
func javaResolveFailure(mvnOutput string) bool {
	for _, s := range []string{"Could not resolve", "Could not transfer", "Unknown host", "No plugin found", "could not be resolved", "Failed to read artifact descriptor"} {
		if strings.Contains(mvnOutput, s) {
			return true
		}
	}
	return false
}
