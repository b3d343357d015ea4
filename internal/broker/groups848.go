package broker

import (
	"slices"

	"github.com/moonmq/moonmq/internal/group"
)

// groupTopics is the group coordinator's view of the topics, for the
// server-side assignment of KIP-848 consumer groups. Internal topics are
// invisible to it: no consumer may be assigned them. The view is the same
// for every member of a group (the coordinator calls it under its lock).
type groupTopics struct{ b *Broker }

var _ group.Topics = groupTopics{}

func (g groupTopics) meta(t *topic) (group.TopicMeta, bool) {
	if t == nil || internalTopic(t.name) {
		return group.TopicMeta{}, false
	}
	return group.TopicMeta{Name: t.name, ID: t.id, Partitions: int32(len(t.partitions))}, true
}

// Topic looks a topic up by name.
func (g groupTopics) Topic(name string) (group.TopicMeta, bool) { return g.meta(g.b.lookup(name)) }

// TopicByID looks a topic up by id.
func (g groupTopics) TopicByID(id [16]byte) (group.TopicMeta, bool) {
	return g.meta(g.b.topicByID(id))
}

// Names lists the topics a regex subscription may match, sorted.
func (g groupTopics) Names() []string {
	g.b.mu.RLock()
	names := make([]string, 0, len(g.b.topics))
	for name := range g.b.topics {
		if !internalTopic(name) {
			names = append(names, name)
		}
	}
	g.b.mu.RUnlock()
	slices.Sort(names)
	return names
}
