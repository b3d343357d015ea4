package flowcheck

import (
	"context"
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

func count(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

// TestCheckCatchesWhatIsWrong writes the topics of a word count by hand,
// right and then wrong in each way the check looks for.
func TestCheckCatchesWhatIsWrong(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	c := testenv.MoonMQ(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const app = "fc"
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 2, 1, nil, Input, Output, Changelog(app)); err != nil {
		t.Fatal(err)
	}
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(topic, k string, v []byte) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(k), Value: v}
	}
	produce(rec(Input, "1", []byte("a  B")), rec(Input, "2", []byte("A")))
	produce(rec(Output, "a", []byte("1")), rec(Output, "b", []byte("1")), rec(Output, "a", []byte("2")))
	produce(rec(Changelog(app), "a", count(1)), rec(Changelog(app), "b", count(1)), rec(Changelog(app), "a", count(2)))

	want, lines, err := Expected(ctx, c.Bootstrap())
	if err != nil {
		t.Fatal(err)
	}
	if lines != 2 || !Equal(want, map[string]int64{"a": 2, "b": 1}) {
		t.Fatalf("reference of 2 lines: %d lines, %v", lines, want)
	}
	rep, err := CheckExactlyOnce(ctx, c.Bootstrap(), app, want)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Updates != 3 || rep.Changelog != 3 || rep.Words != 2 {
		t.Fatalf("a right word count: %s", rep)
	}

	// A repeated update, a word nobody wrote, a changelog that replays
	// to another count.
	produce(rec(Output, "b", []byte("1")), rec(Output, "zz", []byte("1")), rec(Changelog(app), "b", count(5)))
	rep, err = CheckExactlyOnce(ctx, c.Bootstrap(), app, want)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.BadWords != 1 || rep.Unknown != 1 || !rep.ChangelogDiffers {
		t.Fatalf("a wrong word count passed or was misjudged: bad=%d unknown=%d changelog=%v: %s", rep.BadWords, rep.Unknown, rep.ChangelogDiffers, rep)
	}
	t.Log(rep)

	// A lost update: the reference has one more "a" than the output.
	want["a"]++
	rep, err = CheckExactlyOnce(ctx, c.Bootstrap(), app, want)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BadWords != 2 || !strings.Contains(strings.Join(rep.Problems, "\n"), `word "a": input holds it 3 times; committed output counts [1 2]`) {
		t.Fatalf("a lost update was not reported: %s", rep)
	}
}

func TestDiff(t *testing.T) {
	got := map[string]int64{"a": 1, "b": 0, "c": 3}
	want := map[string]int64{"a": 1, "b": 2, "d": 0}
	if Equal(got, want) || Equal(map[string]int64{"x": 0}, map[string]int64{"y": 0}) || !Equal(want, want) {
		t.Error("Equal")
	}
	if d := Diff(got, want); d != "3 keys, 3 differ: b: got 0 want 2; c: got 3 want none; d: got none want 0" {
		t.Errorf("Diff: %s", d)
	}
}
