package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeAcls lists ACL bindings. A follower forwards it, and answers
// from its own copy when it cannot.
func init() {
	register(apiDef[*kmsg.DescribeACLsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeACLsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeAcls(r), nil
		},
		authorize:   clusterDescribe[*kmsg.DescribeACLsRequest],
		forwardable: forwardAlways[*kmsg.DescribeACLsRequest],
	})
}

func (b *Broker) handleDescribeAcls(r *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	b.refreshACLs()
	f, err := aclFilter(r.Version, r.ResourceType, r.ResourceName, r.ResourcePatternType, r.Principal, r.Host, r.Operation, r.PermissionType)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
		return resp
	}
	type resKey struct {
		rt      kmsg.ACLResourceType
		name    string
		pattern kmsg.ACLResourcePatternType
	}
	index := map[resKey]int{}
	for _, a := range b.sec.acls.Matching(f) {
		k := resKey{a.ResourceType, a.ResourceName, a.PatternType}
		i, ok := index[k]
		if !ok {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = k.rt, k.name, k.pattern
			resp.Resources = append(resp.Resources, res)
			i = len(resp.Resources) - 1
			index[k] = i
		}
		acl := kmsg.NewDescribeACLsResponseResourceACL()
		acl.Principal, acl.Host, acl.Operation, acl.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, acl)
	}
	return resp
}

// aclFilter is the filter a DescribeAcls request or a DeleteAcls entry
// names, checked; version 0 of both knows only LITERAL patterns.
func aclFilter(version int16, rt kmsg.ACLResourceType, name *string, pattern kmsg.ACLResourcePatternType, principal, host *string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) (auth.Filter, error) {
	f := auth.Filter{ResourceType: rt, Name: name, Pattern: pattern, Principal: principal, Host: host, Operation: op, Permission: perm}
	if version == 0 {
		f.Pattern = kmsg.ACLResourcePatternTypeLiteral
	}
	return f, f.Validate()
}
