package broker

import (
	"context"
	"fmt"
	"net"
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// Every Kafka API the broker answers is registered by one api_*.go file,
// which holds all that is particular to it: the versions advertised, the
// handler, the ACL rule, and what a follower does with it. handle below
// is the one place that applies them, in the same order for every API.

type waitFunc = func(context.Context) kmsg.Response

// runFunc serves a request (or the allowed part of one) that has passed
// the ACL check.
type runFunc = func(kmsg.Request) (kmsg.Response, waitFunc)

// api is one registered Kafka API, its functions taking the request as
// the generic kmsg.Request (register wraps the typed ones).
type api struct {
	key      int16
	versions protocol.VersionRange
	// byConnection: the connection answers it before dispatch (SASL).
	byConnection bool
	serve        func(b *Broker, cn *conn, req protocol.Request) (kmsg.Response, waitFunc)
	authorize    func(z *authz, req kmsg.Request, run runFunc) (kmsg.Response, waitFunc, bool)
	forwardable  func(b *Broker, req kmsg.Request) bool
	forwardNow   func(b *Broker, req kmsg.Request) bool
	onFollower   func(b *Broker, req kmsg.Request) kmsg.Response
	forwardFail  func(b *Broker, req kmsg.Request, code int16) kmsg.Response
	coordinator  func(req kmsg.Request) coordinatorKeys
}

// coordinatorKind says which coordinator serves a request.
type coordinatorKind int8

const (
	noCoordinator coordinatorKind = iota
	groupCoordinator
	txnCoordinator
)

// apiDef is how an api_*.go file registers its API, typed by its request.
type apiDef[R kmsg.Request] struct {
	versions protocol.VersionRange
	// byConnection marks the SASL APIs, which the connection answers
	// itself before a request is dispatched (sasl.go).
	byConnection bool
	// serve answers a request that passed the follower and ACL checks.
	// A request that must wait (acks=all produce, long-poll fetch)
	// returns a wait function instead of a response; the connection runs
	// it on its own goroutine.
	serve func(b *Broker, cn *conn, r R, req protocol.Request) (kmsg.Response, waitFunc)
	// authorize applies the ACLs to a principal that is not a super user
	// while ACLs are in force. It returns handled=false when the request
	// may run as it is; otherwise the answer (or wait) it returns has the
	// denied parts refused and the allowed parts served through run.
	authorize func(z *authz, r R, run runFunc) (kmsg.Response, waitFunc, bool)
	// forwardable reports whether the request is of the class a follower
	// may send to the leader (forward.go), which refuses anything else;
	// nil: none is.
	forwardable func(b *Broker, r R) bool
	// forwardNow narrows forwardable to what a follower does forward now
	// (nil: all of it); the rest it answers as onFollower says.
	forwardNow func(b *Broker, r R) bool
	// onFollower answers the request on a follower that does not forward
	// it (nil: no answer at all, as for acks=0); a nil onFollower means a
	// follower serves it from its own copy, which is also its answer when
	// forwarding fails.
	onFollower func(b *Broker, r R) kmsg.Response
	// forwardFail answers when forwarding failed with a retriable code
	// (nil: code in every error field).
	forwardFail func(b *Broker, r R, code int16) kmsg.Response
	// coordinator names the coordinator that serves the request and the
	// keys it asks about (nil: none). In cluster mode a group that hosts
	// none of the keys answers NOT_COORDINATOR; one that hosts some of
	// them serves those and answers NOT_COORDINATOR for the rest.
	coordinator func(r R) coordinatorKeys
}

// coordinatorKeys is which coordinator serves a request, and the group ids
// or transactional ids it asks about. A request that may ask about several
// names its list of keys (field, one entry per key) and its answer's
// (respField), so that the keys hosted elsewhere are split off.
type coordinatorKeys struct {
	kind             coordinatorKind
	keys             []string
	field, respField string
}

// groupKey and txnKey are the coordinator rules of requests about one
// group id or transactional id.
func groupKey[R kmsg.Request](key func(R) string) func(R) coordinatorKeys {
	return func(r R) coordinatorKeys { return coordinatorKeys{kind: groupCoordinator, keys: []string{key(r)}} }
}

func txnKey[R kmsg.Request](key func(R) string) func(R) coordinatorKeys {
	return func(r R) coordinatorKeys { return coordinatorKeys{kind: txnCoordinator, keys: []string{key(r)}} }
}

// groupKeys is the coordinator rule of requests about a list of groups,
// their Groups, answered in their answer's Groups.
func groupKeys[R kmsg.Request](keys func(R) []string) func(R) coordinatorKeys {
	return func(r R) coordinatorKeys {
		return coordinatorKeys{kind: groupCoordinator, keys: keys(r), field: "Groups", respField: "Groups"}
	}
}

// apis holds the registered APIs by key; versions is what ApiVersions
// advertises and what the server accepts, built from it.
var (
	apis     = map[int16]*api{}
	versions = protocol.Table{}
)

// register adds an API. It runs from the api_*.go files' init functions.
//
// Minimum versions reach as low as clients probe, because librdkafka
// enables a feature only when an exact old version is inside the range
// (record format v2 needs Produce 3 and Fetch 4). Maximums stop before
// versions whose semantics the broker does not implement.
func register[R kmsg.Request](d apiDef[R]) {
	var zero R
	key := zero.Key()
	if _, dup := apis[key]; dup {
		panic(fmt.Sprintf("broker: API %s registered twice", kmsg.NameForKey(key)))
	}
	a := &api{key: key, versions: d.versions, byConnection: d.byConnection}
	if d.serve != nil {
		a.serve = func(b *Broker, cn *conn, req protocol.Request) (kmsg.Response, waitFunc) {
			return d.serve(b, cn, req.Body.(R), req)
		}
	}
	if d.authorize != nil {
		a.authorize = func(z *authz, req kmsg.Request, run runFunc) (kmsg.Response, waitFunc, bool) {
			return d.authorize(z, req.(R), run)
		}
	}
	if d.forwardable != nil {
		a.forwardable = func(b *Broker, req kmsg.Request) bool { return d.forwardable(b, req.(R)) }
	}
	if d.forwardNow != nil {
		a.forwardNow = func(b *Broker, req kmsg.Request) bool { return d.forwardNow(b, req.(R)) }
	}
	if d.onFollower != nil {
		a.onFollower = func(b *Broker, req kmsg.Request) kmsg.Response { return d.onFollower(b, req.(R)) }
	}
	if d.forwardFail != nil {
		a.forwardFail = func(b *Broker, req kmsg.Request, code int16) kmsg.Response { return d.forwardFail(b, req.(R), code) }
	}
	if d.coordinator != nil {
		a.coordinator = func(req kmsg.Request) coordinatorKeys { return d.coordinator(req.(R)) }
	}
	apis[key] = a
	versions[key] = d.versions
}

// handle answers one request: a follower forwards or refuses what only
// the leader can answer, then the ACLs apply, then the API's handler.
func (b *Broker) handle(cn *conn, req protocol.Request) (kmsg.Response, waitFunc) {
	a := apis[req.Key]
	if b.cl != nil && a.coordinator != nil {
		if ck := a.coordinator(req.Body); ck.kind != noCoordinator {
			codes := make([]int16, len(ck.keys))
			elsewhere := 0
			for i, key := range ck.keys {
				if !b.cl.coordinates(ck.kind, key) {
					codes[i] = errNotCoordinator
					elsewhere++
				}
			}
			switch {
			case elsewhere == 0:
			case elsewhere < len(ck.keys) && ck.field != "":
				return splitRun(req.Body, ck.field, ck.respField, codes, func(body kmsg.Request) (kmsg.Response, waitFunc) {
					part := req
					part.Body = body
					return b.handleHere(cn, a, part)
				})
			default:
				// Another group hosts them: the client asks
				// FindCoordinator again, which names that group's
				// leader.
				return b.notCoordinatorCode(req.Body, errNotCoordinator), nil
			}
		}
	}
	return b.handleHere(cn, a, req)
}

// handleHere answers a request this group serves: a follower forwards or
// refuses what only the leader can answer, then the ACLs apply, then the
// API's handler.
func (b *Broker) handleHere(cn *conn, a *api, req protocol.Request) (kmsg.Response, waitFunc) {
	if b.following() {
		if !cn.viaForward && a.forwards(b, req.Body) {
			return nil, func(ctx context.Context) kmsg.Response { return b.forward(ctx, cn, req) }
		}
		if resp, refused := b.refuseOnFollower(req); refused {
			return resp, nil
		}
	}
	if resp, wait, handled := b.authorizeRequest(cn, a, req); handled {
		return resp, wait
	}
	return a.serve(b, cn, req)
}

// forwards reports whether a follower sends req to the leader.
func (a *api) forwards(b *Broker, req kmsg.Request) bool {
	return a.forwardable != nil && a.forwardable(b, req) && (a.forwardNow == nil || a.forwardNow(b, req))
}

// refuseOnFollower is a follower's answer to a request it neither
// forwards nor serves; refused is false when it serves it.
func (b *Broker) refuseOnFollower(req protocol.Request) (resp kmsg.Response, refused bool) {
	a := apis[req.Body.Key()]
	if a == nil || a.onFollower == nil {
		return nil, false
	}
	return a.onFollower(b, req.Body), true
}

// authorizeRequest applies the ACLs to a request: see apiDef.authorize.
func (b *Broker) authorizeRequest(cn *conn, a *api, req protocol.Request) (kmsg.Response, waitFunc, bool) {
	principal := cn.aclPrincipal()
	if b.sec.authorizer.SuperUser(principal) {
		return nil, nil, false
	}
	b.refreshACLs()
	if !b.sec.authorizer.Enforcing() {
		return nil, nil, false
	}
	z := &authz{b: b, cn: cn, principal: principal, host: cn.ip(), api: kmsg.NameForKey(req.Key)}
	run := func(body kmsg.Request) (kmsg.Response, waitFunc) {
		allowed := req
		allowed.Body = body
		return a.serve(b, cn, allowed)
	}
	return a.authorize(z, req.Body, run)
}

// Rules several APIs share.

// allowAll is the ACL rule of APIs anyone may call.
func allowAll[R kmsg.Request](*authz, R, runFunc) (kmsg.Response, waitFunc, bool) {
	return nil, nil, false
}

// whole answers the whole request with code unless ok.
func whole(req kmsg.Request, ok bool, code int16) (kmsg.Response, waitFunc, bool) {
	if ok {
		return nil, nil, false
	}
	return denyAll(req, code), nil, true
}

// afterRun applies fix to a served answer, now or when its wait finishes.
func afterRun(resp kmsg.Response, wait waitFunc, fix func(kmsg.Response) kmsg.Response) (kmsg.Response, waitFunc) {
	if wait == nil {
		if resp == nil || resp == acks0Failed {
			return resp, nil
		}
		return fix(resp), nil
	}
	return nil, func(ctx context.Context) kmsg.Response {
		resp := wait(ctx)
		if resp == nil || resp == acks0Failed {
			return resp
		}
		return fix(resp)
	}
}

// denyAll answers a request with code in every error field, one entry per
// request entry (the same filling a follower uses to refuse requests).
func denyAll(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	mirror(reflect.ValueOf(req).Elem(), reflect.ValueOf(resp).Elem(), code)
	return resp
}

// splitRun serves the entries of a request's list field whose code is 0
// and answers the others with their code: each refused entry becomes its
// own one-entry request, answered by denyAll, and its answer entry is
// appended to the served answer's list.
func splitRun(req kmsg.Request, reqField, respField string, codes []int16, run func(kmsg.Request) (kmsg.Response, waitFunc)) (kmsg.Response, waitFunc) {
	denied := false
	for _, c := range codes {
		denied = denied || c != 0
	}
	if !denied {
		return run(req)
	}
	rv := reflect.ValueOf(req).Elem()
	list := rv.FieldByName(reqField)
	kept := reflect.MakeSlice(list.Type(), 0, list.Len())
	var refused []reflect.Value
	for i := 0; i < list.Len(); i++ {
		if codes[i] == 0 {
			kept = reflect.Append(kept, list.Index(i))
			continue
		}
		one := reflect.New(rv.Type())
		one.Elem().Set(rv)
		one.Elem().FieldByName(reqField).Set(reflect.Append(reflect.MakeSlice(list.Type(), 0, 1), list.Index(i)))
		resp := denyAll(one.Interface().(kmsg.Request), codes[i])
		if rl := reflect.ValueOf(resp).Elem().FieldByName(respField); rl.IsValid() && rl.Len() == 1 {
			refused = append(refused, rl.Index(0))
		}
	}
	allowed := reflect.New(rv.Type())
	allowed.Elem().Set(rv)
	allowed.Elem().FieldByName(reqField).Set(kept)
	resp, wait := run(allowed.Interface().(kmsg.Request))
	return afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
		rl := reflect.ValueOf(resp).Elem().FieldByName(respField)
		if rl.IsValid() {
			rl.Set(reflect.Append(rl, refused...))
		}
		return resp
	})
}

// groupRead is the rule of group-member APIs: READ on the group.
func groupRead[R kmsg.Request](group func(R) string) func(*authz, R, runFunc) (kmsg.Response, waitFunc, bool) {
	return func(z *authz, r R, _ runFunc) (kmsg.Response, waitFunc, bool) {
		return whole(r, z.allowed(opRead, resGroup, group(r)), errGroupAuthorizationFailed)
	}
}

// clusterDescribe is the rule of APIs that read cluster-wide state.
func clusterDescribe[R kmsg.Request](z *authz, r R, _ runFunc) (kmsg.Response, waitFunc, bool) {
	return whole(r, z.allowed(opDescribe, resCluster, clusterResource), errClusterAuthorizationFailed)
}

// perTopic authorizes each of a request's Topics entries with op: the
// allowed ones are served, the others answer TOPIC_AUTHORIZATION_FAILED.
func perTopic[R kmsg.Request, T any](z *authz, r R, topics []T, name func(T) string, op kmsg.ACLOperation, run runFunc) (kmsg.Response, waitFunc, bool) {
	codes := make([]int16, len(topics))
	for i, t := range topics {
		codes[i] = z.topicCode(op, name(t))
	}
	resp, wait := splitRun(r, "Topics", "Topics", codes, run)
	return resp, wait, true
}

// perResource authorizes each of a config request's Resources entries
// with op (configCode).
func perResource[R kmsg.Request, T any](z *authz, r R, resources []T, id func(T) (kmsg.ConfigResourceType, string), op kmsg.ACLOperation, run runFunc) (kmsg.Response, waitFunc, bool) {
	codes := make([]int16, len(resources))
	for i, res := range resources {
		typ, name := id(res)
		codes[i] = z.configCode(op, typ, name)
	}
	resp, wait := splitRun(r, "Resources", "Resources", codes, run)
	return resp, wait, true
}

// perGroup authorizes each of a request's Groups entries with op.
func perGroup[R kmsg.Request](z *authz, r R, groups []string, op kmsg.ACLOperation, run runFunc) (kmsg.Response, waitFunc, bool) {
	codes := make([]int16, len(groups))
	for i, g := range groups {
		if !z.allowed(op, resGroup, g) {
			codes[i] = errGroupAuthorizationFailed
		}
	}
	resp, wait := splitRun(r, "Groups", "Groups", codes, run)
	return resp, wait, true
}

// refuseWith answers a request a follower does not serve with code in
// every error field.
func refuseWith[R kmsg.Request](code int16) func(*Broker, R) kmsg.Response {
	return func(_ *Broker, r R) kmsg.Response {
		resp := r.ResponseKind()
		mirror(reflect.ValueOf(r).Elem(), reflect.ValueOf(resp).Elem(), code)
		return resp
	}
}

// notCoordinatorOnFollower is the follower answer of group and
// transaction coordinator requests (notCoordinator).
func notCoordinatorOnFollower[R kmsg.Request](b *Broker, r R) kmsg.Response {
	return b.notCoordinator(r)
}

// forwardAlways is the forward rule of requests only the leader can
// answer.
func forwardAlways[R kmsg.Request](*Broker, R) bool { return true }

// securityOnFollower refuses an ACL or credential change on a follower
// that cannot forward it, naming the leader.
func securityOnFollower[R kmsg.Request](b *Broker, r R) kmsg.Response {
	return securityFail(b, r, errNotController)
}

// securityFail answers an ACL or credential change whose forwarding
// failed, naming the leader.
func securityFail[R kmsg.Request](b *Broker, r R, code int16) kmsg.Response {
	resp, _ := b.securityOnFollowerCode(r, code)
	return resp
}

// securityOnFollowerCode refuses an ACL or credential change on a
// follower with code, one per entry naming the leader: clients send these
// requests to any broker, and a follower cannot write.
func (b *Broker) securityOnFollowerCode(req kmsg.Request, code int16) (kmsg.Response, bool) {
	msg := "this replica is a follower: send ACL and user changes to the leader"
	if host, port, ok := b.repl.endpoint(b.repl.leaderID()); ok {
		msg += fmt.Sprintf(" (%s)", net.JoinHostPort(host, fmt.Sprint(port)))
	}
	return securityRefusal(req, code, msg)
}

// securityRefusal answers an ACL or credential change with code and msg
// in each entry.
func securityRefusal(req kmsg.Request, code int16, msg string) (kmsg.Response, bool) {
	switch r := req.(type) {
	case *kmsg.CreateACLsRequest:
		resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
		for range r.Creations {
			resp.Results = append(resp.Results, kmsg.CreateACLsResponseResult{ErrorCode: code, ErrorMessage: kmsg.StringPtr(msg)})
		}
		return resp, true
	case *kmsg.DeleteACLsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
		for range r.Filters {
			resp.Results = append(resp.Results, kmsg.DeleteACLsResponseResult{ErrorCode: code, ErrorMessage: kmsg.StringPtr(msg)})
		}
		return resp, true
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		for _, u := range append(userNames(r.Deletions), userNamesUp(r.Upsertions)...) {
			if !seen[u] {
				seen[u] = true
				resp.Results = append(resp.Results, kmsg.AlterUserSCRAMCredentialsResponseResult{User: u, ErrorCode: code, ErrorMessage: kmsg.StringPtr(msg)})
			}
		}
		return resp, true
	}
	return nil, false
}

func userNames(ds []kmsg.AlterUserSCRAMCredentialsRequestDeletion) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

func userNamesUp(us []kmsg.AlterUserSCRAMCredentialsRequestUpsertion) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Name
	}
	return out
}
