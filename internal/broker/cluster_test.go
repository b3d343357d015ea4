package broker

import "testing"

// TestReplicationAddress: the replication address a broker registers is
// one other groups can dial.
func TestReplicationAddress(t *testing.T) {
	for _, c := range []struct {
		advertised, voter, replicateHost, clientHost string
		want                                         string
	}{
		{"", "10.0.0.1:9095", "0.0.0.0", "10.0.0.1", "10.0.0.1:9095"}, // a voter: its entry
		{"", "", "10.0.0.4", "10.0.0.9", "10.0.0.4:9095"},             // ReplicateHost names an interface
		{"", "", "0.0.0.0", "10.0.0.9", "10.0.0.9:9095"},              // every interface: the client host
		{"", "", "::", "host.example", "host.example:9095"},
		{"", "", "", "10.0.0.9", "10.0.0.9:9095"},
		// Cluster.ReplicationAddress wins, voter or not.
		{"nat.example:19095", "10.0.0.1:9095", "0.0.0.0", "10.0.0.1", "nat.example:19095"},
		{"nat.example:19095", "", "10.0.0.4", "10.0.0.9", "nat.example:19095"},
	} {
		if got := replicationAddress(c.advertised, c.voter, c.replicateHost, c.clientHost, 9095); got != c.want {
			t.Errorf("replicationAddress(%q, %q, %q, %q) = %q, want %q", c.advertised, c.voter, c.replicateHost, c.clientHost, got, c.want)
		}
	}
}
