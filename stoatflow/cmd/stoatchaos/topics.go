package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/stoatflow/internal/flowcheck"
)

// createTopics creates the word count's input and output topics (3
// partitions, as the example would) and waits until every broker, asked
// directly, describes them with a leader for every partition.
//
// The pods would create them themselves, but a pod that reads their
// metadata from a replica that has not caught up with the creation yet
// gets LEADER_NOT_AVAILABLE and exits at start (see the Fault runs
// section of docs/STOATFLOW.md); the harness starts the pods after that
// window, so that the run tests the faults it injects.
func createTopics(ctx context.Context, addrs []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, 3, -1, nil, flowcheck.Input, flowcheck.Output)
	if err != nil {
		return err
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	for _, addr := range addrs {
		var why error
		for {
			if why = described(ctx, addr, flowcheck.Input, flowcheck.Output); why == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("broker %s: %v", addr, why)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// described asks the broker at addr itself for the topics' metadata: nil
// when it names a leader for each of their partitions.
func described(ctx context.Context, addr string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := cl.SeedBrokers()[0].Request(rctx, req)
	if err != nil {
		return err
	}
	resp := r.(*kmsg.MetadataResponse)
	if len(resp.Topics) != len(topics) {
		return fmt.Errorf("metadata describes %d of %d topics", len(resp.Topics), len(topics))
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("topic %s: %w", *t.Topic, err)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("topic %s: no partitions", *t.Topic)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %s partition %d: leader %d, %v", *t.Topic, p.Partition, p.Leader, err)
			}
		}
	}
	return nil
}
