package auth

import "github.com/twmb/franz-go/pkg/kmsg"

// Authorizer is the broker's ACL decision, as Kafka's StandardAuthorizer
// makes it: super users bypass the ACLs, a matching DENY wins over an
// ALLOW, and a resource no binding names is allowed only with
// allowIfNone (Server.AllowEveryoneIfNoAclFound).
type Authorizer struct {
	acls        *ACLs
	superUsers  map[string]struct{}
	allowIfNone bool
}

// NewAuthorizer decides with acls, which the caller keeps up to date.
func NewAuthorizer(acls *ACLs, superUsers []string, allowIfNone bool) *Authorizer {
	z := &Authorizer{acls: acls, superUsers: map[string]struct{}{}, allowIfNone: allowIfNone}
	for _, p := range superUsers {
		z.superUsers[p] = struct{}{}
	}
	return z
}

// SuperUser reports whether a principal bypasses ACLs.
func (z *Authorizer) SuperUser(principal string) bool {
	_, ok := z.superUsers[principal]
	return ok
}

// Enforcing reports whether ACLs can refuse anything: not while there are
// none and a resource no ACL names is allowed, which lets the broker skip
// the per-request checks.
func (z *Authorizer) Enforcing() bool {
	return z.acls.Len() > 0 || !z.allowIfNone
}

// Authorize reports whether principal, connected from host, may do op to
// the resource of type rt called name.
func (z *Authorizer) Authorize(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	return z.acls.authorize(principal, host, op, rt, name, z.allowIfNone)
}

// AllowsAny reports whether principal has an ALLOW for op on some resource
// of a type: Kafka's check for idempotent producers, which need WRITE on
// any topic.
func (z *Authorizer) AllowsAny(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType) bool {
	return z.acls.allowsAny(principal, host, op, rt)
}
