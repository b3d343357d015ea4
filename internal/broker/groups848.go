package broker

import (
	"maps"
	"slices"

	"github.com/moonmq/moonmq/internal/group"
)

// groupTopics is the group coordinator's view of the topics, for the
// server-side assignment of KIP-848 consumer groups: a snapshot taken
// before the coordinator's lock, so that a heartbeat never waits under
// that lock for b.mu (held across file creation and fsync by topic
// creation and CreatePartitions). Internal topics are not in it: no
// consumer may be assigned them. The view is the same for every member of
// a group.
type groupTopics struct {
	byName map[string]group.TopicMeta
	byID   map[[16]byte]group.TopicMeta
}

var _ group.Topics = groupTopics{}

// groupTopics snapshots the topics for one coordinator call.
func (b *Broker) groupTopics() groupTopics {
	b.mu.RLock()
	defer b.mu.RUnlock()
	g := groupTopics{byName: make(map[string]group.TopicMeta, len(b.topics)), byID: make(map[[16]byte]group.TopicMeta, len(b.topics))}
	for name, t := range b.topics {
		if internalTopic(name) {
			continue
		}
		m := group.TopicMeta{Name: name, ID: t.id, Partitions: int32(len(t.partitions))}
		g.byName[name], g.byID[t.id] = m, m
	}
	return g
}

// Topic looks a topic up by name.
func (g groupTopics) Topic(name string) (group.TopicMeta, bool) {
	m, ok := g.byName[name]
	return m, ok
}

// TopicByID looks a topic up by id.
func (g groupTopics) TopicByID(id [16]byte) (group.TopicMeta, bool) {
	m, ok := g.byID[id]
	return m, ok
}

// Names lists the topics a regex subscription may match, sorted.
func (g groupTopics) Names() []string { return slices.Sorted(maps.Keys(g.byName)) }
