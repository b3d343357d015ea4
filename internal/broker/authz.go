package broker

import (
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
