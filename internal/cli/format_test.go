package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/status"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func render(f func(*bytes.Buffer)) string {
	var b bytes.Buffer
	f(&b)
	return b.String()
}

func wantSame(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormatStatusFailoverLeader(t *testing.T) {
	d := status.Replication{
		Role: "leader", ReplicaID: 1, Leader: 1, Epoch: 3, ISR: []int32{1, 2},
		Followers: map[string]status.FollowerPosition{
			"2":  {LastFetch: now.Add(-120 * time.Millisecond), Partitions: map[string]int64{"events-0": 100, "events-1": 50}},
			"3":  {LastFetch: now.Add(-12 * time.Second), Partitions: map[string]int64{"events-0": 40}},
			"10": {},
		},
		Raft: &status.Raft{Role: "leader", Leader: 1, RaftLeader: 1, Epoch: 3, ISR: []int32{1, 2}, HasISR: true, Serving: true,
			RaftTerm: 3, CommitIndex: 12, Applied: 12},
	}
	logs := map[string]LogRange{"events-0": {0, 100}, "events-1": {0, 50}, "__consumer_offsets-0": {5, 7}}
	got := render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now, Logs: logs}) })
	wantSame(t, got, `replica 1: leader (failover mode, serving)
leader:    1, epoch 3
ISR:       1,2
raft:      leader, term 3, commit index 12, applied 12
followers:
  REPLICA  IN ISR  LAST FETCH  LAG (RECORDS)  BEHIND ON
  2        yes     100ms ago   2              __consumer_offsets-0 (2)
  3        no      12s ago     112            events-0 (60), events-1 (50), __consumer_offsets-0 (2)
  10       no      never       -              events-0 (100), events-1 (50), __consumer_offsets-0 (2)
`)

	// Without the leader's log ends: positions, and how to get the lag.
	got = render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	for _, want := range []string{
		"  2        yes     100ms ago   events-0@100, events-1@50\n",
		"  10       no      never       -\n",
		"pass --metrics HOST:PORT or --config FILE",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in:\n%s", want, got)
		}
	}
}

func TestFollowerLagListsFurthestBehindFirst(t *testing.T) {
	logs := map[string]LogRange{}
	fp := status.FollowerPosition{Partitions: map[string]int64{}}
	for i, key := range []string{"a-0", "a-1", "a-2", "a-3", "a-4"} {
		logs[key] = LogRange{0, 100}
		fp.Partitions[key] = int64(i * 10)
	}
	// A follower below the leader's log start lacks only what is left.
	logs["b-0"] = LogRange{90, 100}
	fp.Partitions["b-0"] = 3
	lag, behind := followerLag(fp, logs)
	if lag != 100+90+80+70+60+10 {
		t.Fatalf("lag %d", lag)
	}
	if behind != "a-0 (100), a-1 (90), a-2 (80), +3 more" {
		t.Fatalf("behind %q", behind)
	}
}

func TestFormatStatusFollower(t *testing.T) {
	d := status.Replication{
		Role: "follower", ReplicaID: 3, Leader: 1, Epoch: 3, ISR: []int32{1, 2},
		Follower: &status.Follower{State: "fetching", LeaderID: 1, Leader: "127.0.0.1:9201", Epoch: 3, Fetches: 1234, Resets: 1,
			LastError: "fetch: connection reset", Unauthorized: true, Fenced: true, Unsyncable: []string{"events-0"}},
		Raft: &status.Raft{Role: "follower", Leader: 1, RaftLeader: 1, Epoch: 3, ISR: []int32{1, 2}, HasISR: true,
			RaftTerm: 3, CommitIndex: 12, Applied: 11},
	}
	got := render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	wantSame(t, got, `replica 3: follower (failover mode)
leader:    1, epoch 3
ISR:       1,2
raft:      follower, term 3, commit index 12, applied 11, raft leader 1
note:      this replica is not in the ISR (catching up)
following: replica 1 at 127.0.0.1:9201, epoch 3; state fetching; 1234 fetches, 1 resets, 0 corrupt batches
ERROR:     the leader rejects this replica's token: Replication.Token must be the same on every replica
note:      fenced by a newer epoch: waiting to learn the new leader
ERROR:     cannot fsync the logs of events-0: check the disk
last error: fetch: connection reset
`)
}

func TestFormatStatusElection(t *testing.T) {
	d := status.Replication{
		Role: "follower", ReplicaID: 2, Leader: -1, Epoch: 0,
		Follower: &status.Follower{State: "idle", LeaderID: -1},
		Raft:     &status.Raft{Role: "leader", Leader: -1, RaftLeader: 2, RaftTerm: 2, HandingOff: false, Err: "write replication-raft.json: no space left on device"},
	}
	got := render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	wantSame(t, got, `replica 2: follower (failover mode)
leader:    none known (election under way, or no majority), epoch 0
ISR:       none committed yet
raft:      leader, term 2, commit index 0, applied 0
note:      Raft leader, not serving yet (its claim is committing or its state is rebuilding)
ERROR:     Raft storage failed and this replica stopped: write replication-raft.json: no space left on device
following: no leader yet; state idle; 0 fetches, 0 resets, 0 corrupt batches
`)
	d.Raft.HandingOff = true
	d.Raft.Err = ""
	d.Raft.Role = "candidate"
	d.Raft.RaftLeader = -1
	got = render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	if !strings.Contains(got, "no raft leader known") || !strings.Contains(got, "handing leadership to an ISR member") {
		t.Fatal(got)
	}
}

func TestFormatStatusStatic(t *testing.T) {
	d := status.Replication{Role: "leader", ReplicaID: 1, Leader: 1, Epoch: 1, ISR: []int32{1}, Followers: map[string]status.FollowerPosition{}}
	got := render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	wantSame(t, got, `replica 1: leader (static mode)
leader:    1, epoch 1
ISR:       1
followers: none
`)
}

func TestFormatStats(t *testing.T) {
	s := status.Stats{NodeID: 1, ClusterID: "c1", Role: "standalone", Connections: 2, Requests: 10, ProducedRecords: 5,
		ProducedBytes: 1536, FetchedBytes: 3 << 20, Fsyncs: 4, FsyncAvgMicros: 350, Topics: 2,
		Partitions: []status.Partition{
			{Topic: "b", Partition: 0, LogEndOffset: 5, HighWatermark: 5, SizeBytes: 1536},
			{Topic: "a", Partition: 1, LogStartOffset: 2, LogEndOffset: 9, HighWatermark: 8, SizeBytes: 10},
		}}
	got := render(func(b *bytes.Buffer) { FormatStats(b, s) })
	wantSame(t, got, `node 1 (standalone), cluster c1
connections: 2, requests: 10, bad frames: 0
produced:    5 records, 1.5 KiB; fetched: 3.0 MiB
fsyncs:      4, average 350µs
topics:      2
  PARTITION  LOG START  HIGH WATERMARK  LOG END  SIZE
  a-1        2          8               9        10 B
  b-0        0          5               5        1.5 KiB
`)
	s.Expired = status.Expired{Offsets: 3, Groups: 1, Producers: 2}
	s.Partitions = nil
	got = render(func(b *bytes.Buffer) { FormatStats(b, s) })
	wantSame(t, got, `node 1 (standalone), cluster c1
connections: 2, requests: 10, bad frames: 0
produced:    5 records, 1.5 KiB; fetched: 3.0 MiB
fsyncs:      4, average 350µs
expired:     3 offsets, 1 groups, 2 producers, 0 transactional ids
topics:      2
`)
}

func TestTopicViewsAndFormat(t *testing.T) {
	id := kadm.TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	tds := kadm.TopicDetails{
		"events": {Topic: "events", ID: id, Partitions: kadm.PartitionDetails{
			1: {Topic: "events", Partition: 1, Leader: -1, LeaderEpoch: 4, Replicas: []int32{1, 2, 3}, ISR: []int32{1}, OfflineReplicas: []int32{2, 3},
				Err: kerr.LeaderNotAvailable},
			0: {Topic: "events", Partition: 0, Leader: 2, LeaderEpoch: 4, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}},
		}},
		"gone": {Topic: "gone", Err: kerr.UnknownTopicOrPartition},
	}
	val := func(s string) *string { return &s }
	cfgs := kadm.ResourceConfigs{{Name: "events", Configs: []kadm.Config{
		{Key: "segment.bytes", Value: val("1073741824"), Source: kmsg.ConfigSourceDefaultConfig},
		{Key: "retention.ms", Value: val("60000"), Source: kmsg.ConfigSourceDynamicTopicConfig},
		{Key: "cleanup.policy", Value: val("compact"), Source: kmsg.ConfigSourceDynamicTopicConfig},
	}}}
	starts := kadm.ListedOffsets{"events": {0: {Offset: 0}, 1: {Offset: -1, Err: kerr.NotLeaderForPartition}}}
	ends := kadm.ListedOffsets{"events": {0: {Offset: 42}, 1: {Offset: -1, Err: kerr.NotLeaderForPartition}}}
	views := BuildTopicViews(tds, cfgs, starts, ends)
	got := render(func(b *bytes.Buffer) { FormatTopics(b, views) })
	wantSame(t, got, `Topic: events TopicId: AQIDBAUGBwgJCgsMDQ4PEA PartitionCount: 2 ReplicationFactor: 3 Configs: cleanup.policy=compact,retention.ms=60000
Topic: events Partition: 0 Leader: 2 Replicas: 1,2,3 Isr: 1,2,3 Epoch: 4 LogStart: 0 HighWatermark: 42
Topic: events Partition: 1 Leader: none Replicas: 1,2,3 Isr: 1 Offline: 2,3 Epoch: 4 Offsets: NOT_LEADER_FOR_PARTITION Error: LEADER_NOT_AVAILABLE
Topic: gone Error: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.
`)

	// Nothing but metadata (the other requests failed): still the
	// kafka-topics view, without the offsets and configs.
	views = BuildTopicViews(tds, nil, nil, nil)
	got = render(func(b *bytes.Buffer) { FormatTopics(b, views[:1]) })
	wantSame(t, got, `Topic: events TopicId: AQIDBAUGBwgJCgsMDQ4PEA PartitionCount: 2 ReplicationFactor: 3 Configs:
Topic: events Partition: 0 Leader: 2 Replicas: 1,2,3 Isr: 1,2,3 Epoch: 4
Topic: events Partition: 1 Leader: none Replicas: 1,2,3 Isr: 1 Offline: 2,3 Epoch: 4 Error: LEADER_NOT_AVAILABLE
`)
}

func TestSeedBrokers(t *testing.T) {
	got, err := seedBrokers(" a:1, b:2 ,", "")
	if err != nil || strings.Join(got, " ") != "a:1 b:2" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := seedBrokers("nohost", ""); err == nil {
		t.Fatal("a bootstrap without a port was accepted")
	}
	got, _ = seedBrokers("", "")
	if strings.Join(got, " ") != "127.0.0.1:9092" {
		t.Fatal(got)
	}
	path := t.TempDir() + "/c.json"
	writeFile(t, path, `{"Server": {"Host": "0.0.0.0", "Port": 9300, "AdvertisedAddress": "h1:9300", "Replication": {"Enabled": true, "ReplicaId": 1,
		"Role": "leader", "ReplicatePort": 9301, "ClientAddress": "h1:9300", "Token": "t", "Failover": {"Enabled": true},
		"Peers": [{"Id": 2, "Address": "h2:9301", "ClientAddress": "h2:9300"}, {"Id": 3, "Address": "h3:9301", "ClientAddress": "h3:9300"}]}}}`)
	got, err = seedBrokers("", path)
	if err != nil || strings.Join(got, " ") != "h1:9300 h2:9300 h3:9300" {
		t.Fatalf("%v %v", got, err)
	}
}

func TestExplainDialNamesWhatToDo(t *testing.T) {
	if err := explainDial(errors.New("weird"), "h:1", metricsPort); !strings.Contains(err.Error(), "check the metrics port: --metrics") {
		t.Fatal(err)
	}
}

// TestFormatStatusLagFromLeader: a leader that reports each follower's lag
// needs no metrics port for the lag column.
func TestFormatStatusLagFromLeader(t *testing.T) {
	lag := int64(7)
	d := status.Replication{Role: "leader", ReplicaID: 1, Leader: 1, Epoch: 2, ISR: []int32{1, 2},
		Followers: map[string]status.FollowerPosition{
			"2": {LastFetch: now.Add(-time.Second), Partitions: map[string]int64{"events-0": 3}, Lag: &lag},
		}}
	got := render(func(b *bytes.Buffer) { FormatStatus(b, StatusView{Doc: d, Now: now}) })
	for _, want := range []string{"LAG (RECORDS)", "  2        yes     1s ago      7              events-0@3\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "pass --metrics") {
		t.Fatalf("asks for the metrics port although the leader reported the lag:\n%s", got)
	}
}
