package config

import (
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	s := Default()
	if s.ClientListenAddr() != "127.0.0.1:9092" || s.DataDir != "./data" || s.MetricsListenAddr() != "127.0.0.1:9100" {
		t.Fatalf("unexpected defaults: %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !*s.AutoCreateTopics || s.DefaultPartitions != 1 || s.MaxRequestBytes != 100<<20 {
		t.Fatalf("unexpected defaults: %+v", s)
	}
	// Kafka's defaults for the state that expires.
	if s.OffsetsRetentionMinutes != 10080 || s.OffsetsRetentionCheckMs != 600000 ||
		s.ProducerIdExpirationMs != 86400000 || s.ProducerIdExpirationCheckMs != 600000 ||
		s.TransactionalIdExpirationMs != 604800000 || s.TransactionalIdExpirationCheckMs != 3600000 {
		t.Fatalf("unexpected expiry defaults: %+v", s)
	}
}

func TestParseSeedExample(t *testing.T) {
	s, err := Parse([]byte(`{"Server": {
	  "Host": "127.0.0.1", "Port": 19092, "DataDir": "/tmp/x", "MetricsPort": 0,
	  "Acks": "all",
	  "Replication": {
	    "Enabled": true, "ReplicaId": 1, "Role": "leader", "ReplicateHost": "0.0.0.0",
	    "ReplicatePort": 9095, "ClientAddress": "10.0.0.1:9092", "Token": "shared-secret",
	    "AckTimeout": 5,
	    "Peers": [
	      { "Id": 2, "Address": "10.0.0.2:9095", "ClientAddress": "10.0.0.2:9092" },
	      { "Id": 3, "Address": "10.0.0.3:9095", "ClientAddress": "10.0.0.3:9092" }
	    ],
	    "Failover": { "Enabled": true }
	  }}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.MetricsPort != 0 || s.Port != 19092 || s.Replication.ReplicaId != 1 || len(s.Replication.Peers) != 2 {
		t.Fatalf("parsed wrong: %+v", s)
	}
	if a, _ := ParseAcks(s.Acks); a != AcksAll {
		t.Fatalf("acks %v", a)
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct{ json, want string }{
		{`{"Server": {"Prot": 1}}`, `unknown key "Prot"`},
		{`{"Server": {"Port": "9092"}}`, `key "Port": expected int`},
		{`{"Server": {"Port": 70000}}`, `key "Port"`},
		{`{"Server": {"Acks": "some"}}`, `key "Acks"`},
		{`{"Server": {"DefaultPartitions": -3}}`, `key "DefaultPartitions"`},
		{`{"Server": {"Host": "0.0.0.0"}}`, `key "AdvertisedAddress"`},
		{`{"Server": {"Replication": {"Enabled": true, "Failover": {"Enabled": true}}, "Cluster": {"Enabled": true}}}`, `key "Cluster.Experimental": cluster mode is not finished`},
		{`{"Server": {"Replication": {"Enabled": true, "ReplicaId": 2, "Role": "follower", "ReplicatePort": 9095, "ClientAddress": "a:1",
		   "Peers": [{"Id": 1, "Address": "b:2", "ClientAddress": "c:3"}, {"Id": 3, "Address": "d:2", "ClientAddress": "e:3"}], "Failover": {"Enabled": true}},
		   "Cluster": {"Enabled": true, "Experimental": true, "ClusterId": "c", "BrokerId": 4, "GroupId": "g1",
		   "MetadataVoters": [{"Id": 1, "Address": "b:2"}, {"Id": 2, "Address": "x:1"}, {"Id": 3, "Address": "d:2"}]}}}`, `key "Cluster.BrokerId": 4 must equal Replication.ReplicaId (2)`},
		{`{"Server": {"Replication": {"Enabled": true, "ReplicaId": 2, "Role": "follower", "ReplicatePort": 9095, "ClientAddress": "a:1",
		   "Peers": [{"Id": 1, "Address": "b:2", "ClientAddress": "c:3"}, {"Id": 3, "Address": "d:2", "ClientAddress": "e:3"}], "Failover": {"Enabled": true}},
		   "Cluster": {"Enabled": true, "Experimental": true, "ClusterId": "c", "BrokerId": 2, "GroupId": "g 1",
		   "MetadataVoters": [{"Id": 1, "Address": "b:2"}, {"Id": 1, "Address": "x"}]}}}`, `key "Cluster.GroupId"`},
		{`{"Server": {"Cluster": {"Enabled": true}}}`, `key "Cluster.Enabled"`},
		{`{"Server": {"Replication": {"Enabled": true, "Failover": {"Enabled": true}}, "Cluster": {"Enabled": true, "Experimental": true, "CoordinatorPartitions": 1001}}}`, `key "Cluster.CoordinatorPartitions": 1001 must be 1-1000`},
		{`{"Server": {"Replication": {"Enabled": true, "Failover": {"Enabled": true}}, "Cluster": {"Enabled": true, "Experimental": true, "CoordinatorPartitions": -1}}}`, `key "Cluster.CoordinatorPartitions": -1 must be 1-1000`},
		{`{"Server": {"Replication": {"Enabled": true, "Failover": {"Enabled": true}}, "Cluster": {"Enabled": true, "Experimental": true, "MoveBytesPerSecond": -5}}}`, `key "Cluster.MoveBytesPerSecond": -5 must be 0 (no cap) or more`},
		{`{"Server": {"Replication": {"Enabled": true, "Failover": {"Enabled": true}}, "Cluster": {"Enabled": true, "Experimental": true, "ReplicationAddress": "nat.example"}}}`, `key "Cluster.ReplicationAddress": "nat.example" is not host:port`},
		{`{"Server": {"Replication": {"Enabled": true, "ReplicaId": 1, "Role": "leader", "ReplicatePort": 9095, "ClientAddress": "a:1",
		   "Peers": [{"Id": 1, "Address": "b:2", "ClientAddress": "c:3"}], "Failover": {"Enabled": true}}}}`, `Replication.Peers[0].Id`},
		{`{"Server": {"Replication": {"Enabled": true, "ReplicaId": 1, "Role": "leader", "ReplicatePort": 9095, "ClientAddress": "a:1",
		   "Peers": [{"Id": 2, "Address": "b:2", "ClientAddress": "c:3"}, {"Id": 3, "Address": "d:2", "ClientAddress": "e:3"}, {"Id": 4, "Address": "f:2", "ClientAddress": "g:3"}], "Failover": {"Enabled": true}}}}`, `3 or 5 replicas`},
		{`{"Server": {"Replication": {"Enabled": true, "ReplicaId": 1, "Role": "boss", "ReplicatePort": 9095, "ClientAddress": "a:1"}}}`, `Replication.Role`},
		{`{"Server": {}} {}`, `trailing data`},
		{`{}`, `missing "Server"`},
		{`{"Server": {"Users": [{"Username": "app"}]}}`, `Users[0].Password`},
		{`{"Server": {"OffsetsRetentionMinutes": -2}}`, `key "OffsetsRetentionMinutes"`},
		{`{"Server": {"OffsetsRetentionCheckMs": 5}}`, `key "OffsetsRetentionCheckMs"`},
		{`{"Server": {"ProducerIdExpirationMs": -1}}`, `key "ProducerIdExpirationMs"`},
		{`{"Server": {"ProducerIdExpirationCheckMs": 1}}`, `key "ProducerIdExpirationCheckMs"`},
		{`{"Server": {"TransactionalIdExpirationMs": -5}}`, `key "TransactionalIdExpirationMs"`},
		{`{"Server": {"TransactionalIdExpirationCheckMs": 0.5}}`, `key "TransactionalIdExpirationCheckMs"`},
		{`{"Server": {"MaxOpenSegmentFiles": -1}}`, `key "MaxOpenSegmentFiles"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
}

func TestMaxOpenSegmentFiles(t *testing.T) {
	if s := Default(); s.MaxOpenSegmentFiles != 0 {
		t.Fatalf("default %d, want 0 (from the open-file limit)", s.MaxOpenSegmentFiles)
	}
	s, err := Parse([]byte(`{"Server": {"MaxOpenSegmentFiles": 300}}`))
	if err != nil || s.MaxOpenSegmentFiles != 300 {
		t.Fatalf("%d, %v", s.MaxOpenSegmentFiles, err)
	}
	for nofile, want := range map[uint64]int{0: 64, 256: 64, 1024: 256, 20000: 5000, 1 << 40: 1<<31 - 1} {
		if got := DefaultMaxOpenSegmentFiles(nofile); got != want {
			t.Errorf("open-file limit %d: %d, want %d", nofile, got, want)
		}
	}
}
