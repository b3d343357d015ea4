package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestFormatClusterLag: each partition's line gives, for every other broker
// of its owner group, how many bytes its copy is behind the leader's ("?"
// for a broker that did not report); an internal topic names its group's
// leader without being listed.
func TestFormatClusterLag(t *testing.T) {
	rack := func(s string) *string { return &s }
	md := kadm.Metadata{Cluster: "c", Controller: 1, Brokers: kadm.BrokerDetails{
		{NodeID: 1, Host: "h", Port: 1, Rack: rack("g1")}, {NodeID: 2, Host: "h", Port: 2, Rack: rack("g1")},
		{NodeID: 3, Host: "h", Port: 3, Rack: rack("g1")}, {NodeID: 4, Host: "h", Port: 4, Rack: rack("g2")},
		{NodeID: 5, Host: "h", Port: 5, Rack: rack("g2")},
	}, Topics: kadm.TopicDetails{
		"events": {Topic: "events", Partitions: kadm.PartitionDetails{
			0: {Topic: "events", Partition: 0, Leader: 1, LeaderEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}},
		}},
		"__consumer_offsets": {Topic: "__consumer_offsets", IsInternal: true, Partitions: kadm.PartitionDetails{
			0: {Topic: "__consumer_offsets", Partition: 0, Leader: 4, LeaderEpoch: 7, Replicas: []int32{4, 5}, ISR: []int32{4, 5}},
		}},
	}}
	sizes := LogSizes{1: {"events": {0: 5000}}, 2: {"events": {0: 3830}}}
	var out bytes.Buffer
	FormatCluster(&out, md, nil, sizes, nil)
	got := out.String()
	for _, want := range []string{
		"Partition: events/0 Group: g1 Leader: 1 Epoch: 3 Isr: 1,2 HighWatermark: unknown Lag: 2=1170,3=?\n",
		"Group: g2 Leader: 4 Epoch: 7 Isr: 4,5 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "__consumer_offsets") {
		t.Errorf("cluster status lists an internal topic's partitions:\n%s", got)
	}
	// No sizes at all: the lag is unknown.
	out.Reset()
	FormatCluster(&out, md, nil, nil, nil)
	if !strings.Contains(out.String(), "Lag: unknown\n") {
		t.Errorf("without sizes, want Lag: unknown:\n%s", out.String())
	}
}
