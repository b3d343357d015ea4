package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
)

// TestOffsetsRetention checks Kafka's offsets.retention.minutes with real
// clients: the offsets of a group that has had no member for the retention
// period are deleted, a group with a member keeps its offsets however old,
// an empty group without offsets is deleted at the next check, and the
// deletions are in __consumer_offsets, so a restart does not bring the
// offsets back. The retention passes run on the broker's own method with a
// "now" in the future, instead of waiting seven days.
func TestOffsetsRetention(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "ret", 2, nil)
	produceNumbers(t, client(t, in.Addr(), kgo.DefaultProduceTopic("ret")), 0, 20)

	member := func(group string, opts ...kgo.Opt) *kgo.Client {
		return client(t, in.Addr(), append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics("ret"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}, opts...)...)
	}
	// consume polls until n records arrived, committing them if asked.
	consume := func(cl *kgo.Client, n int, commit bool) {
		t.Helper()
		got := 0
		for got < n {
			fs := cl.PollFetches(ctxT(t))
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			got += fs.NumRecords()
		}
		if commit {
			if err := cl.CommitUncommittedOffsets(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// "gone" consumes, commits and leaves; "live" consumes, commits and
	// stays; "never" joins and leaves without committing; "simple"
	// commits through the admin API without ever joining.
	gone := member("gone")
	consume(gone, 20, true)
	gone.Close()
	live := member("live")
	consume(live, 20, true)
	never := member("never")
	consume(never, 20, false)
	never.Close()
	adm := kadm.NewClient(client(t, in.Addr()))
	var simple kadm.Offsets
	simple.Add(kadm.Offset{Topic: "ret", Partition: 0, At: 7, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctxT(t), "simple", simple); err != nil {
		t.Fatal(err)
	}

	listed := func() []string {
		t.Helper()
		ls, err := adm.ListGroups(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		names := ls.Groups()
		slices.Sort(names)
		return names
	}
	offsets := func(group string) int {
		t.Helper()
		os, err := adm.FetchOffsets(ctxT(t), group)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		os.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				n++
			}
		})
		return n
	}
	want := func(step string, groups []string, counts map[string]int) {
		t.Helper()
		if got := listed(); !slices.Equal(got, groups) {
			t.Fatalf("%s: groups %v, want %v", step, got, groups)
		}
		for g, n := range counts {
			if got := offsets(g); got != n {
				t.Fatalf("%s: group %s has %d committed offsets, want %d", step, g, got, n)
			}
		}
	}
	want("before any check", []string{"gone", "live", "never", "simple"},
		map[string]int{"gone": 2, "live": 2, "simple": 1})

	ctx := ctxT(t)
	// Now: nothing is old enough, but "never" is empty and has no
	// offsets, so it goes.
	if n, g, err := in.Broker.ExpireOffsets(ctx, time.Now()); err != nil || n != 0 || g != 1 {
		t.Fatalf("first check: %d offsets, %d groups, %v; want 0, 1", n, g, err)
	}
	want("after the first check", []string{"gone", "live", "simple"},
		map[string]int{"gone": 2, "live": 2, "simple": 1})

	// Eight days on (retention is seven by default): the empty groups'
	// offsets and then the groups go; "live" has a member and keeps both.
	later := time.Now().Add(8 * 24 * time.Hour)
	if n, g, err := in.Broker.ExpireOffsets(ctx, later); err != nil || n != 3 || g != 2 {
		t.Fatalf("check 8 days on: %d offsets, %d groups, %v; want 3, 2", n, g, err)
	}
	want("eight days on", []string{"live"}, map[string]int{"gone": 0, "live": 2, "simple": 0})
	if e := in.Broker.Snapshot().Expired; e.Offsets != 3 || e.Groups != 3 {
		t.Fatalf("/stats expired %+v, want 3 offsets and 3 groups", e)
	}

	// The member of "live" goes on consuming and committing, and a
	// restart rebuilds the same store from __consumer_offsets.
	produceNumbers(t, client(t, in.Addr(), kgo.DefaultProduceTopic("ret")), 20, 40)
	consume(live, 20, true)
	live.Close()
	adm.Close()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in = startBroker(t, dir)
	adm = kadm.NewClient(client(t, in.Addr()))
	want("after a restart", []string{"live"}, map[string]int{"gone": 0, "live": 2, "simple": 0})
	lo, err := adm.FetchOffsets(ctxT(t), "live")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	lo.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != 40 {
		t.Fatalf("live's committed offsets add up to %d after 40 records, want 40", sum)
	}

	// With OffsetsRetentionMinutes -1 nothing ever expires.
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in = startBroker(t, dir, func(s *config.Server) { s.OffsetsRetentionMinutes = -1 })
	if n, g, err := in.Broker.ExpireOffsets(context.Background(), later.Add(365*24*time.Hour)); err != nil || n != 0 || g != 0 {
		t.Fatalf("with retention -1: %d offsets, %d groups, %v", n, g, err)
	}
}

// TestOffsetsRetentionAcrossRestart: the time a group became empty is
// recorded in __consumer_offsets, so a restart does not restart the
// retention clock. The check runs just past seven days after the group
// emptied: with the record the offsets go, without it (the clock
// restarted at the broker's start, later) they would stay.
func TestOffsetsRetentionAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "ret", 1, nil)
	produceNumbers(t, client(t, in.Addr(), kgo.DefaultProduceTopic("ret")), 0, 5)
	cl := client(t, in.Addr(), kgo.ConsumerGroup("left"), kgo.ConsumeTopics("ret"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	for got := 0; got < 5; {
		fs := cl.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	cl.Close() // the group is empty from here
	leftBy := time.Now()
	if n, err := in.Broker.RecordGroupStates(time.Now()); err != nil || n != 1 {
		t.Fatalf("recorded %d group states, %v; want 1", n, err)
	}
	// A gap, so that "since the restart" and "since the group emptied"
	// differ by more than the margin below.
	time.Sleep(1500 * time.Millisecond)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in = startBroker(t, dir)
	at := leftBy.Add(7*24*time.Hour + time.Millisecond)
	if n, g, err := in.Broker.ExpireOffsets(ctxT(t), at); err != nil || n != 1 || g != 1 {
		t.Fatalf("check seven days after the group emptied, across a restart: %d offsets, %d groups, %v; want 1, 1", n, g, err)
	}
	// The deleted group's record goes with it: another restart does not
	// bring the group back.
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in = startBroker(t, dir)
	ls, err := kadm.NewClient(client(t, in.Addr())).ListGroups(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if names := ls.Groups(); len(names) != 0 {
		t.Fatalf("groups after the deletion and a restart: %v", names)
	}
}
