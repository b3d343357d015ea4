package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/cluster/metanode"
)

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

// TestProposeBlockAgainAfterLosing: a producer-id block refused because
// another block committed first is proposed again (the client's
// InitProducerId must not fail over it); any other error, a bounded run
// of refusals, and a cancelled context end the attempts.
func TestProposeBlockAgainAfterLosing(t *testing.T) {
	lost := &meta.Error{Code: kerr.InvalidRequest, Msg: "next producer id 4000, want 5000"}
	won := metanode.Result{Records: []meta.Record{meta.ProducerIdsRecord{BrokerID: 4, NextProducerID: 6000}}}
	run := func(ctx context.Context, answers ...error) (int, error) {
		calls := 0
		_, err := proposeBlock(ctx, func() (metanode.Result, error) {
			calls++
			if calls <= len(answers) && answers[calls-1] != nil {
				return metanode.Result{}, answers[calls-1]
			}
			return won, nil
		})
		return calls, err
	}
	if calls, err := run(context.Background(), lost, lost); err != nil || calls != 3 {
		t.Fatalf("after two lost races: %d proposals, %v; want 3 and a block", calls, err)
	}
	other := errors.New("no quorum")
	if calls, err := run(context.Background(), other); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("another error: %d proposals, %v; want 1 and that error", calls, err)
	}
	always := make([]error, 2*blockAttempts)
	for i := range always {
		always[i] = lost
	}
	if calls, err := run(context.Background(), always...); !errors.Is(err, kerr.InvalidRequest) || calls != blockAttempts {
		t.Fatalf("refused every time: %d proposals, %v; want %d and the refusal", calls, err, blockAttempts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if calls, err := run(ctx, lost, lost); err == nil || calls != 1 {
		t.Fatalf("cancelled: %d proposals, %v; want 1 and the refusal", calls, err)
	}
}
