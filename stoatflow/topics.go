package stoatflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// prepareTopics reads the partition counts of the sources and sinks,
// checks co-partitioning, and creates (or checks) the internal topics:
// repartition topics, changelogs and the positions marker topic.
func (a *App) prepareTopics(ctx context.Context) error {
	external := map[string]bool{}
	for _, n := range a.topo.nodes {
		if n.source != nil && !n.source.internal {
			for _, t := range n.source.topics {
				external[t] = true
			}
		}
		if n.sink != nil && !n.sink.internal {
			external[n.sink.topic] = true
		}
	}
	var names []string
	for t := range external {
		names = append(names, t)
	}
	sort.Strings(names)
	md, err := a.listStable(ctx, names)
	if err != nil {
		return fmt.Errorf("read metadata from %s: %w", strings.Join(a.cfg.BootstrapServers, ","), err)
	}
	a.partitions = map[string]int{}
	for _, t := range names {
		d, ok := md[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic %s does not exist: create it before starting %s (for example: kafka-topics.sh --create --topic %s --partitions N)", t, a.cfg.ApplicationID, t)
		}
		if d.Err != nil {
			return fmt.Errorf("topic %s: %w", t, d.Err)
		}
		a.partitions[t] = len(d.Partitions)
	}
	// A sub-topology's partition count comes from its external sources;
	// one fed only by repartition topics takes the count of what writes
	// them.
	writers := map[string]int{} // internal topic -> writing sub-topology
	for _, n := range a.topo.nodes {
		if n.sink != nil && n.sink.internal {
			writers[n.sink.topic] = n.sub
		}
	}
	// A reader-sized internal topic takes the count of its reader, so it
	// neither sizes nor constrains that reader.
	readerSized := map[string]int{} // internal topic -> reading sub-topology
	for _, n := range a.topo.nodes {
		if n.source != nil && n.source.readerSized {
			for _, t := range n.source.topics {
				readerSized[t] = n.sub
			}
		}
	}
	for range a.subs {
		for _, sub := range a.subs {
			if sub.partitions > 0 {
				continue
			}
			counts := map[string]int{}
			unresolved := false
			for _, src := range sub.sources {
				for _, t := range src.source.topics {
					switch {
					case src.source.readerSized:
					case src.source.internal:
						if w := a.subs[writers[t]]; w.partitions > 0 {
							counts[a.topicName(t, true)] = w.partitions
						} else {
							unresolved = true
						}
					default:
						counts[t] = a.partitions[t]
					}
				}
			}
			if unresolved || len(counts) == 0 {
				continue // a writer is not resolved yet
			}
			n := 0
			for _, c := range counts {
				n = max(n, c)
			}
			for t, c := range counts {
				if c != n {
					return coPartitionError(sub, counts, t)
				}
			}
			sub.partitions = n
		}
	}
	for _, sub := range a.subs {
		if sub.partitions == 0 {
			return fmt.Errorf("cannot size the sub-topology reading %s (a cycle of repartition topics?)", strings.Join(sub.topics, ", "))
		}
	}
	type want struct {
		partitions int
		configs    map[string]*string
	}
	compact := "compact"
	wants := map[string]want{}
	for t, w := range writers {
		if r, ok := readerSized[t]; ok {
			w = r
		}
		wants[a.topicName(t, true)] = want{partitions: a.subs[w].partitions}
	}
	for _, sub := range a.subs {
		for _, s := range sub.stores {
			if s.changelog {
				wants[a.changelogTopic(s)] = want{partitions: sub.partitions, configs: s.changelogConfigs()}
			}
		}
	}
	if a.exactlyOnce() {
		wants[a.positionsTopic()] = want{partitions: 1, configs: map[string]*string{"cleanup.policy": &compact}}
	}
	var internal []string
	for t := range wants {
		internal = append(internal, t)
	}
	sort.Strings(internal)
	have, err := a.adm.ListTopics(ctx, internal...)
	if err != nil {
		return err
	}
	for _, t := range internal {
		w := wants[t]
		if d, ok := have[t]; ok && d.Err == nil {
			if len(d.Partitions) != w.partitions {
				return fmt.Errorf("internal topic %s has %d partitions, but its input has %d: delete it (its state is rebuilt) or restore the input's partition count", t, len(d.Partitions), w.partitions)
			}
			a.partitions[t] = w.partitions
			continue
		}
		resp, err := a.adm.CreateTopic(ctx, int32(w.partitions), int16(a.cfg.ReplicationFactor), w.configs, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create internal topic %s (%d partitions): %w; the application's principal needs Create on it, or create it yourself", t, w.partitions, err)
		}
		a.log.Info("created internal topic", "topic", t, "partitions", w.partitions)
		a.partitions[t] = w.partitions
	}
	return a.waitTopics(ctx, internal)
}

// waitTopics waits until every topic has a leader for each partition, as
// a fresh topic on a replicated cluster may not yet.
func (a *App) waitTopics(ctx context.Context, topics []string) error {
	for {
		md, err := a.adm.ListTopics(ctx, topics...)
		if err != nil {
			return err
		}
		ok := true
		for _, t := range topics {
			d, found := md[t]
			if !found || d.Err != nil || len(d.Partitions) == 0 {
				ok = false
				continue
			}
			for _, p := range d.Partitions {
				if p.Err != nil || p.Leader < 0 {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeAfter(100):
		}
	}
}

func coPartitionError(sub *subTopology, counts map[string]int, _ string) error {
	var parts []string
	for t, c := range counts {
		parts = append(parts, fmt.Sprintf("%s (%d partitions)", t, c))
	}
	sort.Strings(parts)
	return fmt.Errorf("co-partitioning: the topics %s are joined or share a store, so they need the same partition count; repartition one of them", strings.Join(parts, ", "))
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// CreateTopics creates the topics that do not exist yet, with the given
// partition count and the broker's default replication factor, through
// the connection settings of cfg. Examples and tests use it; production
// deployments usually create their topics themselves.
func CreateTopics(ctx context.Context, cfg Config, partitions int, topics ...string) error {
	a := &App{cfg: cfg, log: slogDiscard()}
	opts, err := a.clientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopics(ctx, int32(partitions), int16(cfg.ReplicationFactor), nil, topics...)
	if err != nil {
		return err
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	a.adm = adm
	return a.waitTopics(ctx, topics)
}

// listStable lists topics, waiting out retriable topic errors (a topic
// created a moment ago on a replication group may answer
// LEADER_NOT_AVAILABLE until its leader is in place).
func (a *App) listStable(ctx context.Context, names []string) (kadm.TopicDetails, error) {
	for {
		md, err := a.adm.ListTopics(ctx, names...)
		if err != nil {
			return nil, err
		}
		retry := false
		for _, d := range md {
			if d.Err != nil && kerr.IsRetriable(d.Err) && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				retry = true
			}
		}
		if !retry {
			return md, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeAfter(100):
		}
	}
}
