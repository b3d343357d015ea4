package meta

import (
	"reflect"
	"strings"
	"testing"
)

// sampleState has a bit of everything: brokers of two groups, one of
// which published its state, a third group known only from a broker, a
// move copying and one cut over, configs and producer ids.
func sampleState(t *testing.T) *State {
	t.Helper()
	s := New()
	recs := []Record{
		RegisterBrokerRecord{BrokerID: 1, GroupID: "g1", IncarnationID: testID(1), ClientAddress: "a", ReplicationAddress: "b", LeaseExpiryMs: 10},
		RegisterBrokerRecord{BrokerID: 2, GroupID: "g2", IncarnationID: testID(2), ClientAddress: "a", ReplicationAddress: "b", LeaseExpiryMs: 10},
		RegisterBrokerRecord{BrokerID: 3, GroupID: "g3", IncarnationID: testID(3), ClientAddress: "a", ReplicationAddress: "b", LeaseExpiryMs: 10},
		GroupStateRecord{GroupID: "g1", Leader: 1, Term: 4, ISR: []int32{1}},
		TopicRecord{Name: "a", TopicID: testID(1)},
		PartitionRecord{TopicID: testID(1), Partition: 0, Owner: "g1"},
		PartitionRecord{TopicID: testID(1), Partition: 1, Owner: "g1"},
		PartitionChangeRecord{TopicID: testID(1), Partition: 0, Owner: "g1", Move: MoveCopying, Source: "g1", Target: "g2", MoveSeq: 1},
		PartitionChangeRecord{TopicID: testID(1), Partition: 1, Owner: "g1", Move: MoveCopying, Source: "g1", Target: "g3", MoveSeq: 1},
		PartitionChangeRecord{TopicID: testID(1), Partition: 1, Owner: "g3", EpochBase: 5, Move: MoveCutOver, Source: "g1", Target: "g3", FenceOffset: 9, MoveSeq: 1},
		ConfigRecord{ResourceType: ResourceTopic, ResourceName: "a", Name: "k", Value: "v"},
		ConfigRecord{ResourceType: ResourceBroker, ResourceName: "", Name: "k", Value: "v"},
		ProducerIdsRecord{BrokerID: 1, NextProducerID: 1000},
		SecurityRecord{Store: SecurityACLs, Key: []byte("b"), Value: []byte("1")},
		SecurityRecord{Store: SecurityACLs, Key: []byte("a"), Value: []byte("2")},
		SecurityRecord{Store: SecurityUsers, Key: []byte("u"), Value: []byte("3")},
		SecurityRecord{Store: SecurityUsers, Key: []byte("gone"), Value: []byte("4")},
		SecurityRecord{Store: SecurityUsers, Key: []byte("gone")},
	}
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			t.Fatalf("%#v: %v", r, err)
		}
	}
	return s
}

func TestRestore(t *testing.T) {
	s := sampleState(t)
	r, err := Restore(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, s) {
		t.Fatal("restored state differs")
	}
	// The snapshot shares nothing with the state.
	snap := s.Snapshot()
	snap.Topics[0].Partitions[0].Owner = "g9"
	snap.Groups[0].ISR[0] = 9
	if p, _ := s.Partition(testID(1), 0); p.Owner != "g1" {
		t.Fatal("snapshot aliases the partitions")
	}
	if g, _ := s.Group("g1"); g.ISR[0] != 1 {
		t.Fatal("snapshot aliases an ISR")
	}
}

// TestRestoreRefuses: a snapshot no log could have produced is refused.
func TestRestoreRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Snapshot)
		want string
	}{
		{"version", func(s *Snapshot) { s.Version = 2 }, "version 2"},
		{"group twice", func(s *Snapshot) { s.Groups = append(s.Groups, s.Groups[0]) }, "twice"},
		{"unpublished group with a term", func(s *Snapshot) { s.Groups[2].Term = 3 }, "unpublished"},
		{"unsorted ISR", func(s *Snapshot) { s.Groups[0].ISR = []int32{2, 1} }, "not sorted"},
		{"broker twice", func(s *Snapshot) { s.Brokers = append(s.Brokers, s.Brokers[0]) }, "twice"},
		{"broker of an unknown group", func(s *Snapshot) { s.Brokers[0].Group = "g9" }, "not in the groups"},
		{"topic name twice", func(s *Snapshot) {
			s.Topics = append(s.Topics, SnapshotTopic{ID: testID(2), Name: "a"})
		}, "already exists"},
		{"unknown owner", func(s *Snapshot) { s.Topics[0].Partitions[0].Owner = "g9" }, "unknown owner"},
		{"copying to the owner", func(s *Snapshot) { s.Topics[0].Partitions[0].Target = "g1" }, "copying"},
		{"cut over not owned by the target", func(s *Snapshot) { s.Topics[0].Partitions[1].Owner = "g1" }, "cut over"},
		{"move fields without a move", func(s *Snapshot) { s.Topics[0].Partitions[0].Move = MoveNone }, "without a move"},
		{"unknown move state", func(s *Snapshot) { s.Topics[0].Partitions[0].Move = "x" }, "unknown move state"},
		{"epoch out of range", func(s *Snapshot) { s.Topics[0].Partitions[0].EpochBase = -5 }, "out of range"},
		{"config of no topic", func(s *Snapshot) { s.Configs[1].ResourceName = "b" }, "no topic"},
		{"config without value", func(s *Snapshot) { s.Configs[0].Value = "" }, "without a value"},
		{"config twice", func(s *Snapshot) { s.Configs = append(s.Configs, s.Configs[0]) }, "twice"},
		{"producer ids", func(s *Snapshot) { s.NextProducerID = 1500 }, "block boundary"},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := sampleState(t).Snapshot()
			c.edit(&snap)
			if _, err := Restore(snap); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v, want an error with %q", err, c.want)
			}
		})
	}
}
