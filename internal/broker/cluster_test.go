package broker

import "testing"

// TestReplicationAddress: the replication address a broker registers is
// one other groups can dial.
func TestReplicationAddress(t *testing.T) {
	for _, c := range []struct {
		voter, replicateHost, clientHost string
		want                             string
	}{
		{"10.0.0.1:9095", "0.0.0.0", "10.0.0.1", "10.0.0.1:9095"}, // a voter: its entry
		{"", "10.0.0.4", "10.0.0.9", "10.0.0.4:9095"},             // ReplicateHost names an interface
		{"", "0.0.0.0", "10.0.0.9", "10.0.0.9:9095"},              // every interface: the client host
		{"", "::", "host.example", "host.example:9095"},
		{"", "", "10.0.0.9", "10.0.0.9:9095"},
	} {
		if got := replicationAddress(c.voter, c.replicateHost, c.clientHost, 9095); got != c.want {
			t.Errorf("replicationAddress(%q, %q, %q) = %q, want %q", c.voter, c.replicateHost, c.clientHost, got, c.want)
		}
	}
}
