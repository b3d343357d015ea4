package config

import (
	"strings"
	"testing"
)

// replicationWith is a valid failover replica's block with tls spliced in
// as its TLS key.
func replicationWith(tls string) string {
	return `{"Server": {"Port": 19092, "MetricsPort": 0, "Replication": {
	  "Enabled": true, "ReplicaId": 1, "ReplicatePort": 9095, "ClientAddress": "10.0.0.1:9092", "Token": "t",
	  "Peers": [{"Id": 2, "Address": "10.0.0.2:9095", "ClientAddress": "10.0.0.2:9092"},
	            {"Id": 3, "Address": "10.0.0.3:9095", "ClientAddress": "10.0.0.3:9092"}],
	  "Failover": {"Enabled": true}, "TLS": ` + tls + `}}}`
}

func TestReplicationTLSRefusals(t *testing.T) {
	cases := []struct{ tls, want string }{
		{`{}`, `"Replication.TLS.CertFile"`},
		{`{"CertFile": "c", "ClientCAFile": "ca"}`, `"Replication.TLS.KeyFile"`},
		// The CA verifies the peers' certificates: it is required even
		// without mutual TLS.
		{`{"CertFile": "c", "KeyFile": "k"}`, `"Replication.TLS.ClientCAFile": must be set: on the replication port it is the group's CA`},
		{`{"CertFile": "c", "KeyFile": "k", "RequireClientCert": true}`, `"Replication.TLS.ClientCAFile": must be set when RequireClientCert`},
		{`{"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca", "MinVersion": "1.0"}`, `"Replication.TLS.MinVersion"`},
		{`{"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca", "CAFile": "x"}`, `unknown key "CAFile"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(replicationWith(c.tls)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.tls, err, c.want)
		}
	}
	s, err := Parse([]byte(replicationWith(`{"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca", "RequireClientCert": true, "MinVersion": "1.3"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if tl := s.Replication.TLS; tl == nil || tl.ClientCAFile != "ca" || !tl.RequireClientCert || s.TLS != nil {
		t.Fatalf("parsed %+v (client port TLS %+v)", s.Replication.TLS, s.TLS)
	}
}
