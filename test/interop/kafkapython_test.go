package interop

// kafka-python (Debian's python3-kafka, the pure-Python client) against an
// in-process broker. The test skips without it unless
// MOONMQ_REQUIRE_KAFKAPYTHON=1; then it also requires every codec
// (python3-snappy, python3-lz4 and python3-zstandard). KAFKAPYTHON_DEBUG=1
// passes the client's debug log through to -v.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type kafkaPythonRecord struct {
	Key         *string     `json:"key"`
	ValueSHA256 *string     `json:"value_sha256"`
	ValueLen    int         `json:"value_len"`
	Headers     [][2]string `json:"headers"`
	Timestamp   int64       `json:"timestamp"`
}

// kafkaPythonOut is what testdata/kafkapython_roundtrip.py prints.
type kafkaPythonOut struct {
	Client          string                       `json:"client"`
	APIVersion      string                       `json:"api_version"`
	Errors          []string                     `json:"errors"`
	Codecs          []string                     `json:"codecs"`
	CodecsMissing   []string                     `json:"codecs_missing"`
	FirstAssignment []int32                      `json:"first_assignment"`
	SecondAssign    []int32                      `json:"second_assignment"`
	CommittedFirst  map[string]int64             `json:"committed_first"`
	CommittedSecond map[string]int64             `json:"committed_second"`
	EndOffsets      map[string]int64             `json:"end_offsets"`
	ConsumedFirst   int                          `json:"consumed_first"`
	ConsumedSecond  int                          `json:"consumed_second"`
	Produced        map[string]kafkaPythonRecord `json:"produced"` // by "partition/offset"
}

func kafkaPythonInterpreter(t *testing.T) string {
	t.Helper()
	require := os.Getenv("MOONMQ_REQUIRE_KAFKAPYTHON") == "1"
	py := "/usr/bin/python3" // where Debian's python3-kafka lives
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			py = ""
		}
	}
	why := ""
	if py == "" {
		why = "no python3"
	} else if out, err := exec.Command(py, "-c", "import kafka, kafka.admin").CombinedOutput(); err != nil {
		why = fmt.Sprintf("%s cannot import kafka (%s)", py, strings.TrimSpace(string(out)))
	}
	if why != "" {
		if require {
			t.Fatalf("MOONMQ_REQUIRE_KAFKAPYTHON=1 but %s (apt-get install python3-kafka)", why)
		}
		t.Skipf("%s; install python3-kafka to run this test", why)
	}
	return py
}

// TestKafkaPython: kafka-python probes the broker's version itself (no
// api_version), creates a topic, produces with every codec and reads back
// in a group with commits; a second member of the group reads nothing old
// and then exactly the new records. franz-go then reads what it produced.
func TestKafkaPython(t *testing.T) {
	py := kafkaPythonInterpreter(t)
	in := startBroker(t)
	addr := in.Addr()
	const topic, group = "kafkapython", "kafkapython-group"

	ctx := ctxTimeout(t, 3*time.Minute)
	cmd := exec.CommandContext(ctx, py, "testdata/kafkapython_roundtrip.py", addr, topic, group)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	start := time.Now()
	err := cmd.Run()
	t.Logf("kafkapython_roundtrip.py took %v", time.Since(start).Round(time.Millisecond))
	if stderr.Len() > 0 {
		t.Logf("kafkapython_roundtrip.py stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("kafkapython_roundtrip.py: %v\n%s", err, stdout.String())
	}
	var out kafkaPythonOut
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bad output %q: %v", stdout.String(), err)
	}
	t.Logf("%s, probed broker version %s, codecs %v (missing %v): %d produced, %d + %d consumed",
		out.Client, out.APIVersion, out.Codecs, out.CodecsMissing, len(out.Produced), out.ConsumedFirst, out.ConsumedSecond)
	for _, e := range out.Errors {
		t.Errorf("kafka-python reported: %s", e)
	}
	if len(out.CodecsMissing) > 0 && os.Getenv("MOONMQ_REQUIRE_KAFKAPYTHON") == "1" {
		t.Errorf("MOONMQ_REQUIRE_KAFKAPYTHON=1 but kafka-python lacks codecs %v (apt-get install python3-snappy python3-lz4 python3-zstandard)", out.CodecsMissing)
	}
	if want := 40*len(out.Codecs) + 12; len(out.Produced) != want {
		t.Errorf("kafka-python produced %d records, want %d", len(out.Produced), want)
	}
	if fmt.Sprint(out.FirstAssignment) != "[0 1 2]" || fmt.Sprint(out.SecondAssign) != "[0 1 2]" {
		t.Errorf("assignments %v and %v, want all partitions each", out.FirstAssignment, out.SecondAssign)
	}
	if t.Failed() {
		t.FailNow()
	}

	// What kafka-python wrote, as franz-go reads it.
	cl := franz(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	pctx := ctxTimeout(t, 30*time.Second)
	for len(seen) < len(out.Produced) && pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		fs.EachRecord(func(r *kgo.Record) {
			at := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
			if seen[at] {
				t.Errorf("franz-go read %s twice", at)
			}
			seen[at] = true
			want, ok := out.Produced[at]
			if !ok {
				t.Errorf("franz-go read %s, which kafka-python did not produce", at)
				return
			}
			if d := kafkaPythonDiff(want, r); d != "" {
				t.Errorf("franz-go read %s: %s", at, d)
			}
		})
	}
	if len(seen) != len(out.Produced) {
		var missing []string
		for at := range out.Produced {
			if !seen[at] {
				missing = append(missing, at)
			}
		}
		sort.Strings(missing)
		t.Errorf("franz-go did not read %d of kafka-python's records: %v", len(missing), missing)
	}
	adm := kadm.NewClient(franz(t, addr))
	offs, err := adm.FetchOffsets(ctxTimeout(t, 30*time.Second), group)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range out.CommittedSecond {
		var p int32
		fmt.Sscanf(strings.TrimPrefix(k, topic+"/"), "%d", &p)
		if got, ok := offs.Lookup(topic, p); !ok || got.Err != nil || got.At != want {
			t.Errorf("%s committed %s as franz-go sees it: %+v, want %d", group, k, got, want)
		}
	}
}

func kafkaPythonDiff(want kafkaPythonRecord, r *kgo.Record) string {
	var d []string
	if (want.Key == nil) != (r.Key == nil) || (want.Key != nil && *want.Key != string(r.Key)) {
		d = append(d, fmt.Sprintf("key %s, want %v", nullable(r.Key), strOrNull(want.Key)))
	}
	if want.ValueSHA256 == nil {
		if r.Value != nil {
			d = append(d, fmt.Sprintf("value %s, want null", nullable(r.Value)))
		}
	} else {
		sum := sha256.Sum256(r.Value)
		if r.Value == nil || hex.EncodeToString(sum[:]) != *want.ValueSHA256 {
			d = append(d, fmt.Sprintf("value %s (%d bytes) differs from what was sent (%d bytes)", nullable(r.Value), len(r.Value), want.ValueLen))
		}
	}
	var hs [][2]string
	for _, h := range r.Headers {
		hs = append(hs, [2]string{h.Key, string(h.Value)})
	}
	if !sameHeaders(hs, want.Headers) {
		d = append(d, fmt.Sprintf("headers %q, want %q", hs, want.Headers))
	}
	if r.Timestamp.UnixMilli() != want.Timestamp {
		d = append(d, fmt.Sprintf("timestamp %d, want %d", r.Timestamp.UnixMilli(), want.Timestamp))
	}
	return strings.Join(d, "; ")
}

func strOrNull(s *string) string {
	if s == nil {
		return "<null>"
	}
	return fmt.Sprintf("%q", *s)
}
