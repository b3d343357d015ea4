package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupCommands runs `moonmq group` against a broker process with a
// classic group that consumed and left, and a KIP-848 group with a live
// member: list, describe with lag, seek, and delete, including the
// refusals an operator meets (a group with members).
func TestGroupCommands(t *testing.T) {
	port, mport := freePort(t), freePort(t)
	p := startProc(t, writeConfig(t, t.TempDir(), port, mport, ""), port, mport)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := newClient(t, p.addr, kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	produce := func(n int) {
		t.Helper()
		for i := range n {
			if err := prod.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(10)
	consume := func(cl *kgo.Client, n int) {
		t.Helper()
		for got := 0; got < n; {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			got += fs.NumRecords()
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	opts := []kgo.Opt{kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("ops-test")}
	old := newClient(t, p.addr, append(opts, kgo.ConsumerGroup("billing"))...)
	consume(old, 10)
	old.Close()
	live := newClient(t, p.addr, append(opts, kgo.ConsumerGroup("audit"), kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))...)
	consume(live, 10)
	produce(4) // billing now lags by 2 per partition

	code, out, stderr := moonmq(t, "group", "list", "--bootstrap", p.addr)
	if code != 0 || !regexp.MustCompile(`(?m)^audit +consumer +Stable$`).MatchString(out) || !regexp.MustCompile(`(?m)^billing +classic +Empty$`).MatchString(out) {
		t.Fatalf("group list: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = moonmq(t, "group", "describe", "--bootstrap", p.addr, "billing", "audit", "nosuch")
	for _, re := range []string{
		`(?m)^Group: billing Type: classic State: Empty Members: 0$`,
		`(?m)^billing +orders +0 +5 +7 +2 +- +- +-$`,
		`(?m)^billing +orders +1 +5 +7 +2 +- +- +-$`,
		`(?m)^Group: audit Type: consumer State: Stable Members: 1 Assignor: range$`,
		`(?m)^audit +orders +0 +5 +7 +2 +\S+ +/127\.0\.0\.1 +ops-test$`,
		`(?m)^Group: nosuch Error: GROUP_ID_NOT_FOUND$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("describe: exit %d, missing %s in\n%s\n%s", code, re, out, stderr)
		}
	}
	if code != 1 {
		t.Fatalf("describe with an unknown group: exit %d, want 1", code)
	}

	// Seek: the idle group moves; the live one refuses.
	code, out, stderr = moonmq(t, "group", "seek", "--bootstrap", p.addr, "--to", "start", "billing")
	if code != 0 || !regexp.MustCompile(`(?m)^billing +orders +0 +5 +0$`).MatchString(out) {
		t.Fatalf("seek billing to start: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = moonmq(t, "group", "describe", "--bootstrap", p.addr, "billing")
	if code != 0 || !regexp.MustCompile(`(?m)^billing +orders +1 +0 +7 +7 `).MatchString(out) {
		t.Fatalf("describe after seek: exit %d\n%s", code, out)
	}
	code, out, stderr = moonmq(t, "group", "seek", "--bootstrap", p.addr, "--to", "3", "--topics", "orders", "billing")
	if code != 0 || !regexp.MustCompile(`(?m)^billing +orders +1 +0 +3$`).MatchString(out) {
		t.Fatalf("seek billing to 3: exit %d\n%s\n%s", code, out, stderr)
	}
	code, _, stderr = moonmq(t, "group", "seek", "--bootstrap", p.addr, "--to", "end", "audit")
	if code != 1 || !strings.Contains(stderr, "stop its consumers first") {
		t.Fatalf("seek of a live group: exit %d\n%s", code, stderr)
	}
	code, _, stderr = moonmq(t, "group", "seek", "--bootstrap", p.addr, "--to", "soon", "billing")
	if code != 2 || !strings.Contains(stderr, "want start, end or an offset") {
		t.Fatalf("seek --to soon: exit %d\n%s", code, stderr)
	}

	// Delete: the live group refuses, the idle one goes with its offsets.
	code, _, stderr = moonmq(t, "group", "delete", "--bootstrap", p.addr, "audit")
	if code != 1 || !strings.Contains(stderr, "audit: the group has members: stop its consumers first") {
		t.Fatalf("delete a live group: exit %d\n%s", code, stderr)
	}
	code, out, stderr = moonmq(t, "group", "delete", "--bootstrap", p.addr, "billing")
	if code != 0 || out != "deleted group billing\n" {
		t.Fatalf("delete billing: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = moonmq(t, "group", "list", "--bootstrap", p.addr)
	if code != 0 || strings.Contains(out, "billing") {
		t.Fatalf("list after delete: exit %d\n%s", code, out)
	}
	live.Close()

	p.kill9(t)
	code, _, stderr = moonmq(t, "group", "list", "--bootstrap", p.addr, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "is the broker running?") {
		t.Fatalf("list of a dead broker: exit %d, %s", code, stderr)
	}
}
