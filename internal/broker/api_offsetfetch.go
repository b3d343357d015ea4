package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// OffsetFetch answers groups' committed offsets (v8+: several groups; v9:
// member id and epoch of a KIP-848 member).
func init() {
	register(apiDef[*kmsg.OffsetFetchRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 9},
		serve: func(b *Broker, _ *conn, r *kmsg.OffsetFetchRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.OffsetFetch(r), nil
		},
		authorize: func(z *authz, r *kmsg.OffsetFetchRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			resp, wait := z.offsetFetch(r, run)
			return resp, wait, true
		},
		onFollower: notCoordinatorOnFollower[*kmsg.OffsetFetchRequest],
		coordinator: func(r *kmsg.OffsetFetchRequest) coordinatorKeys {
			if r.Version < 8 {
				return coordinatorKeys{kind: groupCoordinator, keys: []string{r.Group}}
			}
			ck := coordinatorKeys{kind: groupCoordinator, field: "Groups", respField: "Groups"}
			for _, g := range r.Groups {
				ck.keys = append(ck.keys, g.Group)
			}
			return ck
		},
	})
}

// offsetFetch refuses groups the principal may not describe and topics it
// may not describe; a request for all of a group's topics leaves those out.
func (z *authz) offsetFetch(r *kmsg.OffsetFetchRequest, run runFunc) (kmsg.Response, waitFunc) {
	deniedPartitions := func(parts []int32) []kmsg.OffsetFetchResponseGroupTopicPartition {
		var out []kmsg.OffsetFetchResponseGroupTopicPartition
		for _, p := range parts {
			op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			op.Partition, op.Offset, op.ErrorCode = p, -1, errTopicAuthorizationFailed
			out = append(out, op)
		}
		return out
	}
	if r.Version < 8 {
		if !z.allowed(opDescribe, resGroup, r.Group) {
			return denyAll(r, errGroupAuthorizationFailed), nil
		}
		if r.Topics == nil {
			resp, wait := run(r)
			return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
				if o, ok := resp.(*kmsg.OffsetFetchResponse); ok {
					kept := o.Topics[:0]
					for _, t := range o.Topics {
						if z.visible(opDescribe, resTopic, t.Topic) {
							kept = append(kept, t)
						}
					}
					o.Topics = kept
				}
				return resp
			})
		}
		codes := make([]int16, len(r.Topics))
		for i, t := range r.Topics {
			codes[i] = z.topicCode(opDescribe, t.Topic)
		}
		return splitRun(r, "Topics", "Topics", codes, run)
	}
	filtered := *r
	filtered.Groups = nil
	type extra struct {
		group  string
		code   int16
		topics []kmsg.OffsetFetchResponseGroupTopic
	}
	var extras []extra
	changed := false
	for _, g := range r.Groups {
		if !z.allowed(opDescribe, resGroup, g.Group) {
			extras = append(extras, extra{group: g.Group, code: errGroupAuthorizationFailed})
			changed = true
			continue
		}
		fg := g
		if g.Topics != nil {
			fg.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
			var deniedTopics []kmsg.OffsetFetchResponseGroupTopic
			for _, t := range g.Topics {
				if z.topicCode(opDescribe, t.Topic) == 0 {
					fg.Topics = append(fg.Topics, t)
					continue
				}
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic, rt.Partitions = t.Topic, deniedPartitions(t.Partitions)
				deniedTopics = append(deniedTopics, rt)
			}
			if len(deniedTopics) > 0 {
				extras = append(extras, extra{group: g.Group, topics: deniedTopics})
				changed = true
			}
		}
		filtered.Groups = append(filtered.Groups, fg)
	}
	allTopics := false
	for _, g := range r.Groups {
		allTopics = allTopics || g.Topics == nil
	}
	if !changed && !allTopics {
		return run(r)
	}
	var resp kmsg.Response
	var wait waitFunc
	if len(filtered.Groups) > 0 {
		resp, wait = run(&filtered)
	} else {
		resp = r.ResponseKind()
	}
	return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
		o, ok := resp.(*kmsg.OffsetFetchResponse)
		if !ok {
			return resp
		}
		for i := range o.Groups {
			kept := o.Groups[i].Topics[:0]
			for _, t := range o.Groups[i].Topics {
				if z.visible(opDescribe, resTopic, t.Topic) {
					kept = append(kept, t)
				}
			}
			o.Groups[i].Topics = kept
		}
		for _, e := range extras {
			if e.code != 0 {
				g := kmsg.NewOffsetFetchResponseGroup()
				g.Group, g.ErrorCode = e.group, e.code
				o.Groups = append(o.Groups, g)
				continue
			}
			for i := range o.Groups {
				if o.Groups[i].Group == e.group {
					o.Groups[i].Topics = append(o.Groups[i].Topics, e.topics...)
				}
			}
		}
		return resp
	})
}
