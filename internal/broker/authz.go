package broker

import (
	"context"
	"reflect"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
)

// Short names for the ACL vocabulary.
const (
	opRead            = kmsg.ACLOperationRead
	opWrite           = kmsg.ACLOperationWrite
	opCreate          = kmsg.ACLOperationCreate
	opDelete          = kmsg.ACLOperationDelete
	opAlter           = kmsg.ACLOperationAlter
	opDescribe        = kmsg.ACLOperationDescribe
	opDescribeConfigs = kmsg.ACLOperationDescribeConfigs
	opAlterConfigs    = kmsg.ACLOperationAlterConfigs
	opIdempotentWrite = kmsg.ACLOperationIdempotentWrite

	resTopic   = kmsg.ACLResourceTypeTopic
	resGroup   = kmsg.ACLResourceTypeGroup
	resCluster = kmsg.ACLResourceTypeCluster
	resTxnID   = kmsg.ACLResourceTypeTransactionalId

	clusterResource = auth.ClusterResource
)

// authz decides one request of one connection.
type authz struct {
	b         *Broker
	cn        *conn
	principal string
	host      string
	api       string
}

func (z *authz) allowed(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if z.b.sec.authorizer.Authorize(z.principal, z.host, op, rt, name) {
		return true
	}
	z.cn.logDenied(z.api, op, rt, name)
	return false
}

// visible is allowed without a log line, for listings that just leave
// out what the principal may not see (as Kafka does).
func (z *authz) visible(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	return z.b.sec.authorizer.Authorize(z.principal, z.host, op, rt, name)
}

// topicCode is 0 if op on the topic is allowed, else its error code.
func (z *authz) topicCode(op kmsg.ACLOperation, topic string) int16 {
	if z.allowed(op, resTopic, topic) {
		return 0
	}
	return errTopicAuthorizationFailed
}

// mayCreate reports whether the principal may create the topic (CREATE on
// the cluster or on the topic), logging a denial.
func (z *authz) mayCreate(topic string) bool {
	if z.visible(opCreate, resCluster, clusterResource) || z.visible(opCreate, resTopic, topic) {
		return true
	}
	z.cn.logDenied(z.api, opCreate, resTopic, topic)
	return false
}

// logDenied logs a denial once per connection, operation and resource, so
// a retrying client does not flood the log.
func (cn *conn) logDenied(api string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) {
	key := deniedKey{op, rt, name}
	cn.deniedMu.Lock()
	if cn.denied == nil {
		cn.denied = map[deniedKey]bool{}
	}
	seen := cn.denied[key]
	if !seen && len(cn.denied) < 256 {
		cn.denied[key] = true
	}
	cn.deniedMu.Unlock()
	if !seen {
		cn.log.Info("authorization denied", "principal", cn.aclPrincipal(), "api", api, "operation", op.String(),
			"resource_type", rt.String(), "resource", name, "client_id", cn.client)
	}
}

type deniedKey struct {
	op   kmsg.ACLOperation
	rt   kmsg.ACLResourceType
	name string
}

// deniedLog is the per-connection memory behind logDenied; handlers of one
// connection may run on several goroutines.
type deniedLog struct {
	deniedMu sync.Mutex
	denied   map[deniedKey]bool
}

// configCode authorizes DescribeConfigs/AlterConfigs on a topic (type 2)
// or the broker (4, 8: the cluster).
func (z *authz) configCode(op kmsg.ACLOperation, typ kmsg.ConfigResourceType, name string) int16 {
	if typ == kmsg.ConfigResourceTypeTopic {
		return z.topicCode(op, name)
	}
	if z.allowed(op, resCluster, clusterResource) {
		return 0
	}
	return errClusterAuthorizationFailed
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
