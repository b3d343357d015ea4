package broker

import (
	"reflect"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// replicaEndpoint is one replica's client address.
type replicaEndpoint struct {
	id   int32
	host string
	port int32
}

// endpoints lists the replicas clients are told of as brokers, with their
// client addresses: the live ones. Kafka lists only live brokers, and
// clients rely on it: admin calls that ask every broker (ListGroups,
// ListTransactions) waited out their whole timeout on a dead replica the
// list still named. Partitions keep naming every replica, as Kafka names
// offline replicas.
func (r *replica) endpoints() []replicaEndpoint {
	// What live needs, read once: on a static leader groupISR walks
	// every partition, and Metadata is asked for often.
	var isr, heard []int32
	leading := r.role.serving()
	if r.failover {
		if leading {
			heard = r.node.Status().Heard
		} else {
			isr = r.groupISR()
		}
	}
	leader := r.namedLeader()
	out := make([]replicaEndpoint, 0, len(r.ids))
	for _, id := range r.ids {
		if !r.live(id, leading, isr, heard, leader) {
			continue
		}
		if h, p, ok := r.endpoint(id); ok {
			out = append(out, replicaEndpoint{id, h, p})
		}
	}
	return out
}

// liveWindow is how long after its last fetch a follower counts as live
// for the broker list (Kafka's broker session timeout is 9 s by default).
const liveWindow = 5 * time.Second

// live reports whether replica id is listed as a broker. This replica and
// the leader always are. The serving leader hears every follower's
// fetches, so it lists those that fetched within liveWindow, or, before
// liveWindow has passed since it began leading, those Raft heard from
// this term (in static mode, all); a failover follower
// knows less and lists the committed in-sync set (every replica before
// one is known), a static follower every replica.
func (r *replica) live(id int32, leading bool, isr, heard []int32, leader int32) bool {
	if id == r.self || id == leader {
		return true
	}
	if leading {
		r.mu.Lock()
		last, ok := r.seen[id]
		started := r.started
		r.mu.Unlock()
		window := max(liveWindow, r.isrLag())
		if ok && !last.Before(started) {
			return time.Since(last) <= window
		}
		// Not fetched since this leadership began. In failover mode
		// Raft knows whom it heard from this term: the leader that just
		// died is not among them, and clients must not wait on it.
		if time.Since(started) > window {
			return false
		}
		return !r.failover || slices.Contains(heard, id)
	}
	return !r.failover || len(isr) == 0 || slices.Contains(isr, id)
}

// notCoordinator answers a group or transaction coordinator request on a
// replica that does not serve clients. Only the serving leader coordinates:
// NOT_COORDINATOR makes every client look the coordinator up again at once
// (FindCoordinator names the leader), where NOT_LEADER_OR_FOLLOWER kept
// them retrying this replica. A leader still rebuilding its state from the
// internal topics answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's
// coordinator does while it loads: the client retries the same node.
func (b *Broker) notCoordinator(req kmsg.Request) kmsg.Response {
	code := errNotCoordinator
	if b.repl.role.leading() {
		code = errCoordinatorLoadProgress
	}
	return b.notCoordinatorCode(req, code)
}

// notCoordinatorCode answers a coordinator request with code in every
// error field.
func (b *Broker) notCoordinatorCode(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	mirror(reflect.ValueOf(req).Elem(), reflect.ValueOf(resp).Elem(), code)
	return resp
}

// mirror fills the response struct resp for the request struct req with
// code: every ErrorCode field is set, and every list of the response that
// the request has under the same name (topics, partitions, groups,
// resources...) gets one entry per request entry, carrying the entry's
// identifying fields (those with the same name and type).
// mirrorAliases names, for a response field, the request fields that may
// list its entries when the request's own field of that name is absent or
// empty.
var mirrorAliases = map[string][]string{
	"Topics":            {"TopicNames"},
	"TransactionStates": {"TransactionalIDs"},
}

func mirror(req, resp reflect.Value, code int16) {
	rt := resp.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		fv := resp.Field(i)
		if !f.IsExported() || f.Name == "Version" {
			continue
		}
		if f.Name == "ErrorCode" && fv.Kind() == reflect.Int16 {
			fv.SetInt(int64(code))
			continue
		}
		var rq reflect.Value
		if req.Kind() == reflect.Struct {
			// The request's list may go by another name (DeleteTopics
			// v0-5 sends TopicNames, v6+ Topics; DescribeTransactions
			// asks for TransactionalIDs and answers TransactionStates):
			// take the first candidate that holds entries.
			for _, name := range append([]string{f.Name}, mirrorAliases[f.Name]...) {
				c := req.FieldByName(name)
				if !c.IsValid() {
					continue
				}
				if !rq.IsValid() || rq.Kind() == reflect.Slice && rq.Len() == 0 {
					rq = c
				}
			}
		}
		if !rq.IsValid() {
			continue
		}
		if fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct && rq.Kind() == reflect.Slice {
			out := reflect.MakeSlice(fv.Type(), rq.Len(), rq.Len())
			for j := 0; j < rq.Len(); j++ {
				e := reflect.New(fv.Type().Elem())
				if m := e.MethodByName("Default"); m.IsValid() {
					m.Call(nil)
				}
				src := rq.Index(j)
				if src.Kind() == reflect.Struct {
					mirror(src, e.Elem(), code)
				} else {
					setKey(e.Elem(), src, code)
				}
				out.Index(j).Set(e.Elem())
			}
			fv.Set(out)
			continue
		}
		if rq.Type() == fv.Type() && fv.Kind() != reflect.Slice && fv.Kind() != reflect.Struct {
			fv.Set(rq)
		}
	}
}

// setKey fills an entry mirrored from a plain request value (a group name,
// a topic name, a partition number) and sets its error codes.
func setKey(e, v reflect.Value, code int16) {
	mirror(reflect.Value{}, e, code)
	for _, name := range []string{"Group", "Topic", "Name", "TransactionalID", "Partition", "ResourceName"} {
		f := e.FieldByName(name)
		if !f.IsValid() {
			continue
		}
		switch {
		case f.Type() == v.Type():
			f.Set(v)
			return
		case f.Kind() == reflect.Pointer && f.Type().Elem() == v.Type():
			p := reflect.New(v.Type())
			p.Elem().Set(v)
			f.Set(p)
			return
		}
	}
}
