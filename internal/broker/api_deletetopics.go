package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DeleteTopics deletes topics by name or (v6+) id; only the leader can,
// so a follower forwards it.
func init() {
	register(apiDef[*kmsg.DeleteTopicsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 6},
		serve: func(b *Broker, _ *conn, r *kmsg.DeleteTopicsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			if b.cl != nil {
				return nil, func(ctx context.Context) kmsg.Response { return b.cl.deleteTopics(ctx, r) }
			}
			return b.handleDeleteTopics(r), nil
		},
		authorize:   (*authz).deleteTopics,
		forwardable: forwardAlways[*kmsg.DeleteTopicsRequest],
		onFollower:  refuseWith[*kmsg.DeleteTopicsRequest](errNotController),
	})
}

// deleteTopics refuses the topics the principal may not delete.
func (z *authz) deleteTopics(r *kmsg.DeleteTopicsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
	if r.Version < 6 {
		// Names only: splitRun's mirroring needs entries of the same
		// name in the request and the answer.
		filtered := *r
		filtered.TopicNames = []string{}
		var denied []kmsg.DeleteTopicsResponseTopic
		for _, name := range r.TopicNames {
			if z.topicCode(opDelete, name) == 0 {
				filtered.TopicNames = append(filtered.TopicNames, name)
				continue
			}
			dt := kmsg.NewDeleteTopicsResponseTopic()
			dt.Topic, dt.ErrorCode = kmsg.StringPtr(name), errTopicAuthorizationFailed
			denied = append(denied, dt)
		}
		if len(denied) == 0 {
			return nil, nil, false
		}
		resp, wait := run(&filtered)
		resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
			d := resp.(*kmsg.DeleteTopicsResponse)
			d.Topics = append(d.Topics, denied...)
			return d
		})
		return resp, wait, true
	}
	codes := make([]int16, len(r.Topics))
	for i, t := range r.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		} else if tp := z.b.topicByID(t.TopicID); tp != nil {
			name = tp.name
		}
		if name != "" {
			codes[i] = z.topicCode(opDelete, name)
		}
	}
	resp, wait := splitRun(r, "Topics", "Topics", codes, run)
	return resp, wait, true
}
