package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

type rdkGroupRecord struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// rdkGroupsOut is what testdata/rdkafka_groups.py prints, in either mode.
type rdkGroupsOut struct {
	Librdkafka string           `json:"librdkafka"`
	Errors     []string         `json:"errors"`
	Committed  map[string]int64 `json:"committed"`

	// group mode
	Consumed   []rdkGroupRecord `json:"consumed"`
	Assignment []int32          `json:"assignment"`

	// txn mode
	Steps        []string         `json:"steps"`
	Delivered    []rdkGroupRecord `json:"delivered"`
	PositionTxn1 map[string]int64 `json:"position_txn1"`
	PositionTxn2 map[string]int64 `json:"position_txn2"`
	RCOpen       []rdkGroupRecord `json:"rc_open"`
	RUOpen       []rdkGroupRecord `json:"ru_open"`
	RCAfter      []rdkGroupRecord `json:"rc_after"`
	RUAfter      []rdkGroupRecord `json:"ru_after"`
}

// runRdkGroups runs testdata/rdkafka_groups.py and fails the test on any
// error librdkafka reported.
func runRdkGroups(t *testing.T, py string, args ...string) rdkGroupsOut {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, py, append([]string{"testdata/rdkafka_groups.py"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("rdkafka_groups.py %s stderr:\n%s", args[0], stderr.String())
	}
	if err != nil {
		t.Fatalf("rdkafka_groups.py %v: %v\n%s", args, err, stdout.String())
	}
	var out rdkGroupsOut
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bad output %q: %v", stdout.String(), err)
	}
	for _, e := range out.Errors {
		t.Errorf("librdkafka %s (%s) reported: %s", args[0], out.Librdkafka, e)
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// sameKeys fails unless got holds each key of want exactly once, and
// nothing else.
func sameKeys(t *testing.T, what string, got []rdkGroupRecord, want []string) {
	t.Helper()
	var ks []string
	for _, r := range got {
		ks = append(ks, r.Key)
	}
	sort.Strings(ks)
	w := append([]string{}, want...)
	sort.Strings(w)
	if strings.Join(ks, ",") != strings.Join(w, ",") {
		t.Errorf("%s: got %d records %v, want exactly %d: %v", what, len(ks), ks, len(w), w)
	}
}

func wantCommitted(topic string, ends map[int32]int64) map[string]int64 {
	m := map[string]int64{}
	for p, o := range ends {
		m[fmt.Sprintf("%s/%d", topic, p)] = o
	}
	return m
}

// TestLibrdkafkaConsumerGroup: a librdkafka KafkaConsumer subscribes in a
// group, reads everything and commits; the next run of the group reads
// nothing old, and the one after that only what was produced since.
func TestLibrdkafkaConsumerGroup(t *testing.T) {
	py := python(t)
	in := startBroker(t)
	addr := in.Addr()
	const topic, groupID, partitions = "rdk-group", "rdk-group-1", int32(3)
	saramaCreateTopic(t, addr, topic, partitions)
	all := keyRange("rg", 0, 90)
	saramaProduceKeys(t, addr, topic, partitions, all)
	ends := map[int32]int64{0: 30, 1: 30, 2: 30}

	first := runRdkGroups(t, py, "group", addr, topic, groupID, "90")
	sameKeys(t, "first run", first.Consumed, all)
	if fmt.Sprint(first.Assignment) != "[0 1 2]" {
		t.Errorf("first run: assignment %v, want all partitions", first.Assignment)
	}
	if w := wantCommitted(topic, ends); fmt.Sprint(first.Committed) != fmt.Sprint(w) {
		t.Errorf("first run: committed %v, want %v", first.Committed, w)
	}
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(sarama.V2_8_0_0))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if got := committedOffsets(t, adm, groupID, topic, partitions); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Errorf("committed offsets seen by sarama: %v, want %v", got, ends)
	}

	second := runRdkGroups(t, py, "group", addr, topic, groupID, "0")
	sameKeys(t, "second run", second.Consumed, nil)
	if fmt.Sprint(second.Assignment) != "[0 1 2]" {
		t.Errorf("second run: assignment %v, want all partitions", second.Assignment)
	}

	late := keyRange("late", 0, 6)
	saramaProduceKeys(t, addr, topic, partitions, late)
	for p := range ends {
		ends[p] += 2
	}
	third := runRdkGroups(t, py, "group", addr, topic, groupID, "6")
	sameKeys(t, "third run", third.Consumed, late)
	if w := wantCommitted(topic, ends); fmt.Sprint(third.Committed) != fmt.Sprint(w) {
		t.Errorf("third run: committed %v, want %v", third.Committed, w)
	}
}

// TestLibrdkafkaTransactions: a librdkafka transactional producer commits
// one transaction and aborts another, with consumer offsets in each, while
// read_committed and read_uncommitted consumers watch.
func TestLibrdkafkaTransactions(t *testing.T) {
	py := python(t)
	in := startBroker(t)
	addr := in.Addr()
	const topic, input, groupID, txnID = "rdk-txn", "rdk-txn-in", "rdk-txn-group", "rdk-txn-producer"
	saramaCreateTopic(t, addr, topic, 3)
	saramaCreateTopic(t, addr, input, 1)
	saramaProduceKeys(t, addr, input, 1, keyRange("in", 0, 20))

	out := runRdkGroups(t, py, "txn", addr, topic, input, groupID, txnID)
	if want := "[init txn1 committed txn2 aborted txn3 open txn3 committed]"; fmt.Sprint(out.Steps) != want {
		t.Fatalf("steps %v, want %s", out.Steps, want)
	}
	c1, ab, c3 := keyRange("c1", 0, 10), keyRange("ab", 0, 10), keyRange("c3", 0, 10)
	sameKeys(t, "read_committed while txn 3 is open", out.RCOpen, c1)
	sameKeys(t, "read_uncommitted while txn 3 is open", out.RUOpen, append(append(append([]string{}, c1...), ab...), c3...))
	sameKeys(t, "read_committed after txn 3 committed", out.RCAfter, c3)
	sameKeys(t, "read_uncommitted after txn 3 committed", out.RUAfter, nil)

	// Every record read is where the producer was told it went.
	at := map[string]rdkGroupRecord{}
	for _, r := range out.Delivered {
		at[r.Key] = r
	}
	for _, rs := range [][]rdkGroupRecord{out.RCOpen, out.RUOpen, out.RCAfter} {
		for _, r := range rs {
			if d, ok := at[r.Key]; !ok || d != r {
				t.Errorf("read %+v, delivered %+v", r, d)
			}
		}
	}

	// Only the committed transaction's consumer offsets count.
	in0 := input + "/0"
	if out.PositionTxn1[in0] != 7 || out.PositionTxn2[in0] != 9 {
		t.Errorf("input positions %v then %v, want 7 then 9", out.PositionTxn1, out.PositionTxn2)
	}
	if out.Committed[in0] != 7 {
		t.Errorf("committed input offsets %v, want %s at 7 (txn 2 was aborted)", out.Committed, in0)
	}
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(sarama.V2_8_0_0))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if got := committedOffsets(t, adm, groupID, input, 1); got[0] != 7 {
		t.Errorf("committed offsets seen by sarama: %v, want 7", got)
	}
}

// TestKcatConsumerGroup: kcat's balanced consumer (-G) reads everything
// and commits on exit; the next run reads nothing old.
func TestKcatConsumerGroup(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("MOONMQ_REQUIRE_KCAT") != "" {
			t.Fatal("kcat is required (apt-get install -y kcat)")
		}
		t.Skip("kcat not installed")
	}
	in := startBroker(t)
	addr := in.Addr()
	const topic, groupID, partitions = "kcat-group", "kcat-group-1", int32(3)
	saramaCreateTopic(t, addr, topic, partitions)
	all := keyRange("kc", 0, 30)
	saramaProduceKeys(t, addr, topic, partitions, all)

	run := func() []string {
		t.Helper()
		ctx := ctxTimeout(t, 30*time.Second)
		args := []string{"-b", addr, "-G", groupID, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", "%k=%s\n", topic}
		cmd := exec.CommandContext(ctx, kcat, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kcat %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
		}
		if stderr.Len() > 0 {
			t.Logf("kcat stderr:\n%s", stderr.String())
		}
		lines := strings.Fields(stdout.String())
		sort.Strings(lines)
		return lines
	}
	want := func(keys []string) string {
		var ls []string
		for _, k := range keys {
			ls = append(ls, k+"=v-"+k)
		}
		sort.Strings(ls)
		return strings.Join(ls, ",")
	}
	if got := run(); strings.Join(got, ",") != want(all) {
		t.Fatalf("first kcat -G run got %d records %v, want exactly the %d produced", len(got), got, len(all))
	}
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(sarama.V2_8_0_0))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends := map[int32]int64{0: 10, 1: 10, 2: 10}
	if got := committedOffsets(t, adm, groupID, topic, partitions); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Fatalf("committed offsets after the first kcat run: %v, want %v", got, ends)
	}
	if got := run(); len(got) != 0 {
		t.Fatalf("second kcat -G run got %v, want nothing", got)
	}
	late := keyRange("late", 0, 3)
	saramaProduceKeys(t, addr, topic, partitions, late)
	if got := run(); strings.Join(got, ",") != want(late) {
		t.Fatalf("third kcat -G run got %v, want exactly %v", got, late)
	}
}
