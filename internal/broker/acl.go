package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

// aclsTopic is the internal, compacted topic that holds the ACLs: one
// record per binding, keyed by the whole binding; a tombstone deletes it.
const aclsTopic = "__moonmq_acls"

// clusterResource is the one name a CLUSTER resource has, as in Kafka.
const clusterResource = "kafka-cluster"

// aclBinding is one ACL: who (principal, host) may or may not (permission)
// do what (operation) to which resources (type, name, pattern).
type aclBinding struct {
	ResourceType kmsg.ACLResourceType        `json:"resourceType"`
	ResourceName string                      `json:"resourceName"`
	PatternType  kmsg.ACLResourcePatternType `json:"patternType"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

func (a aclBinding) String() string {
	return fmt.Sprintf("%s %s on %s %s:%s from %s to %s", a.Permission, a.Operation, a.PatternType, a.ResourceType, a.ResourceName, a.Host, a.Principal)
}

// aclSet is the in-memory copy of __moonmq_acls.
type aclSet struct {
	mu  sync.RWMutex
	all map[aclBinding]struct{}
}

func newACLSet() *aclSet { return &aclSet{all: map[aclBinding]struct{}{}} }

func (s *aclSet) reset() {
	s.mu.Lock()
	s.all = map[aclBinding]struct{}{}
	s.mu.Unlock()
}

func (s *aclSet) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.all)
}

func (s *aclSet) apply(r recordbatch.Record) error {
	var a aclBinding
	if err := json.Unmarshal(r.Key, &a); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Value == nil {
		delete(s.all, a)
	} else {
		s.all[a] = struct{}{}
	}
	return nil
}

// matching returns the bindings a filter selects, sorted.
func (s *aclSet) matching(f aclFilter) []aclBinding {
	s.mu.RLock()
	var out []aclBinding
	for a := range s.all {
		if f.matches(a) {
			out = append(out, a)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// authorize is Kafka's decision: a matching DENY wins, then a matching
// ALLOW (or one for an operation that implies op); a resource no ACL
// names at all is decided by allowIfNone.
func (s *aclSet) authorize(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string, allowIfNone bool) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	found, allowed := false, false
	for a := range s.all {
		if a.ResourceType != rt || !a.covers(name) {
			continue
		}
		found = true
		if a.Principal != principal && a.Principal != "User:*" || a.Host != "*" && a.Host != host {
			continue
		}
		switch a.Permission {
		case kmsg.ACLPermissionTypeDeny:
			if a.Operation == op || a.Operation == kmsg.ACLOperationAll {
				return false
			}
		case kmsg.ACLPermissionTypeAllow:
			if implies(a.Operation, op) {
				allowed = true
			}
		}
	}
	if !found {
		return allowIfNone
	}
	return allowed
}

// allowsAny reports whether principal has an ALLOW for op on some resource
// of a type (Kafka's check for idempotent producers: WRITE on any topic).
func (s *aclSet) allowsAny(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for a := range s.all {
		if a.ResourceType == rt && a.Permission == kmsg.ACLPermissionTypeAllow && implies(a.Operation, op) &&
			(a.Principal == principal || a.Principal == "User:*") && (a.Host == "*" || a.Host == host) {
			return true
		}
	}
	return false
}

// covers reports whether the binding's resource pattern covers name.
func (a aclBinding) covers(name string) bool {
	switch a.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
		return a.ResourceName == name || a.ResourceName == "*"
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}

// implies reports whether allowing granted allows op: ALL allows
// everything, and the ones that change or read a resource allow seeing it.
func implies(granted, op kmsg.ACLOperation) bool {
	if granted == op || granted == kmsg.ACLOperationAll {
		return true
	}
	switch op {
	case kmsg.ACLOperationDescribe:
		switch granted {
		case kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter:
			return true
		}
	case kmsg.ACLOperationDescribeConfigs:
		return granted == kmsg.ACLOperationAlterConfigs
	}
	return false
}

// aclFilter is DescribeAcls' and DeleteAcls' selection; nil strings and
// the ANY values match everything.
type aclFilter struct {
	resourceType kmsg.ACLResourceType
	name         *string
	pattern      kmsg.ACLResourcePatternType
	principal    *string
	host         *string
	operation    kmsg.ACLOperation
	permission   kmsg.ACLPermissionType
}

func (f aclFilter) validate() error {
	switch {
	case f.resourceType == kmsg.ACLResourceTypeUnknown || f.resourceType > kmsg.ACLResourceTypeUser:
		return fmt.Errorf("resource type %d is not valid in a filter", f.resourceType)
	case f.pattern == kmsg.ACLResourcePatternTypeUnknown || f.pattern > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("pattern type %d is not valid in a filter", f.pattern)
	case f.operation == kmsg.ACLOperationUnknown || f.operation > kmsg.ACLOperationDescribeTokens:
		return fmt.Errorf("operation %d is not valid in a filter", f.operation)
	case f.permission == kmsg.ACLPermissionTypeUnknown || f.permission > kmsg.ACLPermissionTypeAllow:
		return fmt.Errorf("permission type %d is not valid in a filter", f.permission)
	}
	return nil
}

func (f aclFilter) matches(a aclBinding) bool {
	if f.resourceType != kmsg.ACLResourceTypeAny && f.resourceType != a.ResourceType {
		return false
	}
	if f.principal != nil && *f.principal != a.Principal || f.host != nil && *f.host != a.Host {
		return false
	}
	if f.operation != kmsg.ACLOperationAny && f.operation != a.Operation {
		return false
	}
	if f.permission != kmsg.ACLPermissionTypeAny && f.permission != a.Permission {
		return false
	}
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeAny:
		return f.name == nil || *f.name == a.ResourceName
	case kmsg.ACLResourcePatternTypeMatch:
		// The bindings that would apply to a resource of that name.
		return f.name == nil || a.covers(*f.name)
	default:
		return f.pattern == a.PatternType && (f.name == nil || *f.name == a.ResourceName)
	}
}

// validateBinding checks a binding CreateAcls was asked to create.
func validateBinding(a aclBinding) error {
	switch a.ResourceType {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster, kmsg.ACLResourceTypeTransactionalId:
	default:
		return fmt.Errorf("resource type %s is not supported (use TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID)", a.ResourceType)
	}
	switch a.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
	case kmsg.ACLResourcePatternTypePrefixed:
		if a.ResourceName == "*" {
			return fmt.Errorf("a PREFIXED pattern cannot be the wildcard '*' (use LITERAL '*')")
		}
	default:
		return fmt.Errorf("pattern type %s is not valid for an ACL (use LITERAL or PREFIXED)", a.PatternType)
	}
	if a.ResourceName == "" {
		return fmt.Errorf("the resource name must not be empty")
	}
	if a.ResourceType == kmsg.ACLResourceTypeCluster && (a.ResourceName != clusterResource || a.PatternType != kmsg.ACLResourcePatternTypeLiteral) {
		return fmt.Errorf("a CLUSTER ACL is on the LITERAL resource %q", clusterResource)
	}
	if name, ok := strings.CutPrefix(a.Principal, "User:"); !ok || name == "" {
		return fmt.Errorf("principal %q must be User:<name> or User:*", a.Principal)
	}
	if a.Host == "" {
		return fmt.Errorf("the host must be an IP address or '*'")
	}
	if a.Operation <= kmsg.ACLOperationAny || a.Operation > kmsg.ACLOperationDescribeTokens {
		return fmt.Errorf("operation %d is not valid for an ACL", a.Operation)
	}
	if a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny {
		return fmt.Errorf("permission must be ALLOW or DENY")
	}
	return nil
}

// refreshACLs brings the ACLs up to date with __moonmq_acls.
func (b *Broker) refreshACLs() {
	if err := b.sec.aclLog.catchUp(); err != nil {
		b.log.Error("cannot read the ACLs; authorization uses what was read before", "err", err)
	}
}

func encodeACLRecord(a aclBinding, present bool, now time.Time) recordbatch.Record {
	key, _ := json.Marshal(a)
	rec := recordbatch.Record{Key: key, Timestamp: now.UnixMilli()}
	if present {
		rec.Value = []byte(`{"v":1}`)
	}
	return rec
}

func (b *Broker) handleCreateAcls(ctx context.Context, r *kmsg.CreateACLsRequest, who string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	now := time.Now()
	var recs []recordbatch.Record
	var created []aclBinding
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(r.Creations))
	for i, c := range r.Creations {
		a := aclBinding{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		if r.Version == 0 {
			a.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		if err := validateBinding(a); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
			continue
		}
		recs = append(recs, encodeACLRecord(a, true, now))
		created = append(created, a)
	}
	if len(recs) == 0 {
		return resp
	}
	err := b.writeStateRecords(ctx, aclsTopic, recs)
	b.refreshACLs()
	for i := range resp.Results {
		if resp.Results[i].ErrorCode == 0 && err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = stateWriteError(err), kmsg.StringPtr(err.Error())
		}
	}
	if err == nil {
		for _, a := range created {
			b.log.Info("ACL created", "acl", a.String(), "by", who)
		}
	}
	return resp
}

func (b *Broker) handleDescribeAcls(r *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	b.refreshACLs()
	f := aclFilter{resourceType: r.ResourceType, name: r.ResourceName, pattern: r.ResourcePatternType,
		principal: r.Principal, host: r.Host, operation: r.Operation, permission: r.PermissionType}
	if r.Version == 0 {
		f.pattern = kmsg.ACLResourcePatternTypeLiteral
	}
	if err := f.validate(); err != nil {
		resp.ErrorCode, resp.ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
		return resp
	}
	type resKey struct {
		rt      kmsg.ACLResourceType
		name    string
		pattern kmsg.ACLResourcePatternType
	}
	index := map[resKey]int{}
	for _, a := range b.sec.acls.matching(f) {
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

func (b *Broker) handleDeleteAcls(ctx context.Context, r *kmsg.DeleteACLsRequest, who string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	b.refreshACLs()
	now := time.Now()
	var recs []recordbatch.Record
	deleted := map[aclBinding]bool{}
	for _, rf := range r.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		f := aclFilter{resourceType: rf.ResourceType, name: rf.ResourceName, pattern: rf.ResourcePatternType,
			principal: rf.Principal, host: rf.Host, operation: rf.Operation, permission: rf.PermissionType}
		if r.Version == 0 {
			f.pattern = kmsg.ACLResourcePatternTypeLiteral
		}
		if err := f.validate(); err != nil {
			res.ErrorCode, res.ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
			resp.Results = append(resp.Results, res)
			continue
		}
		for _, a := range b.sec.acls.matching(f) {
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
			m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
			res.MatchingACLs = append(res.MatchingACLs, m)
			if !deleted[a] {
				deleted[a] = true
				recs = append(recs, encodeACLRecord(a, false, now))
			}
		}
		resp.Results = append(resp.Results, res)
	}
	if len(recs) == 0 {
		return resp
	}
	if err := b.writeStateRecords(ctx, aclsTopic, recs); err != nil {
		b.refreshACLs()
		for i := range resp.Results {
			if resp.Results[i].ErrorCode == 0 {
				resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = stateWriteError(err), kmsg.StringPtr(err.Error())
				resp.Results[i].MatchingACLs = nil
			}
		}
		return resp
	}
	b.refreshACLs()
	for a := range deleted {
		b.log.Info("ACL deleted", "acl", a.String(), "by", who)
	}
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
