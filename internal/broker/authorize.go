package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// secretTopic reports whether clients may not read a topic at all, whoever
// they are: the users topic holds credential hashes, which are as good as
// a password for impersonating the broker, and reading the ACL topic would
// bypass DescribeAcls' check.
func secretTopic(name string) bool { return name == usersTopic || name == aclsTopic }

// topicByID returns the topic with an id, or nil.
func (b *Broker) topicByID(id [16]byte) *topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.byID[id]
}

// fetchTopicName is the name of a fetch request's topic ("" if its id is
// unknown: handleFetch answers that).
func (b *Broker) fetchTopicName(r *kmsg.FetchRequest, rt *kmsg.FetchRequestTopic) string {
	if r.Version < 13 {
		return rt.Topic
	}
	if t := b.topicByID(rt.TopicID); t != nil {
		return t.name
	}
	if b.cl != nil {
		return b.cl.current().byID[rt.TopicID]
	}
	return ""
}

// fetchFiltered serves a Fetch in which the topics allowed refuses are not
// read and answer TOPIC_AUTHORIZATION_FAILED.
func (b *Broker) fetchFiltered(r *kmsg.FetchRequest, allowed func(topic string) bool) (kmsg.Response, func(context.Context) kmsg.Response) {
	var denied []kmsg.FetchResponseTopic
	kept := r.Topics[:0:0]
	for i := range r.Topics {
		rt := &r.Topics[i]
		name := b.fetchTopicName(r, rt)
		if name == "" || allowed(name) {
			kept = append(kept, *rt)
			continue
		}
		out := kmsg.FetchResponseTopic{Topic: rt.Topic, TopicID: rt.TopicID}
		for _, rp := range rt.Partitions {
			op := kmsg.NewFetchResponseTopicPartition()
			op.Partition = rp.Partition
			op.ErrorCode = errTopicAuthorizationFailed
			op.HighWatermark, op.LastStableOffset, op.LogStartOffset = -1, -1, -1
			op.PreferredReadReplica = -1
			op.RecordBatches = []byte{}
			out.Partitions = append(out.Partitions, op)
		}
		denied = append(denied, out)
	}
	if len(denied) == 0 {
		return b.handleFetch(r)
	}
	filtered := *r
	filtered.Topics = kept
	addDenied := func(resp kmsg.Response) kmsg.Response {
		if f, ok := resp.(*kmsg.FetchResponse); ok {
			f.Topics = append(f.Topics, denied...)
		}
		return resp
	}
	resp, wait := b.handleFetch(&filtered)
	if wait == nil {
		return addDenied(resp), nil
	}
	return nil, func(ctx context.Context) kmsg.Response { return addDenied(wait(ctx)) }
}
