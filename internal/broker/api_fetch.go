package broker

import (
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// Fetch reads partitions this replica leads, below the high watermark
// (read_committed: below the last stable offset).
func init() {
	register(apiDef[*kmsg.FetchRequest]{
		versions: protocol.VersionRange{Min: 4, Max: 16},
		serve: func(b *Broker, _ *conn, r *kmsg.FetchRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.fetchFiltered(r, func(topic string) bool { return !secretTopic(topic) })
		},
		authorize: func(z *authz, r *kmsg.FetchRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			resp, wait := z.b.fetchFiltered(r, func(t string) bool { return !secretTopic(t) && z.allowed(opRead, resTopic, t) })
			return resp, wait, true
		},
		onFollower: fetchOnFollower,
	})
}

// fetchOnFollower refuses a fetch with NOT_LEADER_OR_FOLLOWER naming the
// leader (KIP-951).
func fetchOnFollower(b *Broker, q *kmsg.FetchRequest) kmsg.Response {
	r := b.repl
	resp := q.ResponseKind().(*kmsg.FetchResponse)
	mirror(reflect.ValueOf(q).Elem(), reflect.ValueOf(resp).Elem(), errNotLeaderOrFollower)
	resp.ErrorCode, resp.SessionID = 0, 0
	id := r.leaderID()
	var hints leaderHints
	for i := range resp.Topics {
		name := b.fetchTopicName(q, &q.Topics[i])
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			p.HighWatermark, p.LastStableOffset, p.LogStartOffset = -1, -1, -1
			p.PreferredReadReplica = -1
			p.RecordBatches = []byte{}
			h := b.leaderHintFor(name, p.Partition, id)
			if h.leader >= 0 {
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = h.leader, h.epoch
				hints.add(h.leader)
			}
		}
	}
	resp.Brokers = hints.fetchBrokers(b, q.Version)
	return resp
}
