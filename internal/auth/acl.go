package auth

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

// ClusterResource is the one name a CLUSTER resource has, as in Kafka.
const ClusterResource = "kafka-cluster"

// Binding is one ACL: who (principal, host) may or may not (permission)
// do what (operation) to which resources (type, name, pattern). Its JSON
// is the key of the binding's record, so the field names are a storage
// format.
type Binding struct {
	ResourceType kmsg.ACLResourceType        `json:"resourceType"`
	ResourceName string                      `json:"resourceName"`
	PatternType  kmsg.ACLResourcePatternType `json:"patternType"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

func (a Binding) String() string {
	return fmt.Sprintf("%s %s on %s %s:%s from %s to %s", a.Permission, a.Operation, a.PatternType, a.ResourceType, a.ResourceName, a.Host, a.Principal)
}

// ACLs is the in-memory copy of the bindings the broker keeps in its ACL
// topic, rebuilt by replaying that topic's records (Reset, ApplyRecord).
// It is safe for concurrent use.
type ACLs struct {
	mu  sync.RWMutex
	all map[Binding]struct{}
}

// NewACLs returns an empty set.
func NewACLs() *ACLs { return &ACLs{all: map[Binding]struct{}{}} }

// Reset forgets every binding, before the records are replayed from
// scratch.
func (s *ACLs) Reset() {
	s.mu.Lock()
	s.all = map[Binding]struct{}{}
	s.mu.Unlock()
}

// Len is the number of bindings.
func (s *ACLs) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.all)
}

// ACLRecord is the record that creates a binding (present) or deletes it:
// keyed by the whole binding, so that compaction keeps the latest word on
// each; a tombstone deletes.
func ACLRecord(a Binding, present bool, now time.Time) recordbatch.Record {
	key, _ := json.Marshal(a)
	rec := recordbatch.Record{Key: key, Timestamp: now.UnixMilli()}
	if present {
		rec.Value = []byte(`{"v":1}`)
	}
	return rec
}

// ApplyRecord applies one record of the ACL topic (ACLRecord).
func (s *ACLs) ApplyRecord(r recordbatch.Record) error {
	var a Binding
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

// Matching returns the bindings a filter selects, sorted.
func (s *ACLs) Matching(f Filter) []Binding {
	s.mu.RLock()
	var out []Binding
	for a := range s.all {
		if f.Matches(a) {
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
func (s *ACLs) authorize(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string, allowIfNone bool) bool {
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
// of a type.
func (s *ACLs) allowsAny(principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType) bool {
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
func (a Binding) covers(name string) bool {
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

// Filter is DescribeAcls' and DeleteAcls' selection; nil strings and the
// ANY values match everything.
type Filter struct {
	ResourceType kmsg.ACLResourceType
	Name         *string
	Pattern      kmsg.ACLResourcePatternType
	Principal    *string
	Host         *string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

// Validate refuses the values a filter may not hold (UNKNOWN, out of
// range).
func (f Filter) Validate() error {
	switch {
	case f.ResourceType == kmsg.ACLResourceTypeUnknown || f.ResourceType > kmsg.ACLResourceTypeUser:
		return fmt.Errorf("resource type %d is not valid in a filter", f.ResourceType)
	case f.Pattern == kmsg.ACLResourcePatternTypeUnknown || f.Pattern > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("pattern type %d is not valid in a filter", f.Pattern)
	case f.Operation == kmsg.ACLOperationUnknown || f.Operation > kmsg.ACLOperationDescribeTokens:
		return fmt.Errorf("operation %d is not valid in a filter", f.Operation)
	case f.Permission == kmsg.ACLPermissionTypeUnknown || f.Permission > kmsg.ACLPermissionTypeAllow:
		return fmt.Errorf("permission type %d is not valid in a filter", f.Permission)
	}
	return nil
}

// Matches reports whether the filter selects a binding.
func (f Filter) Matches(a Binding) bool {
	if f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != a.ResourceType {
		return false
	}
	if f.Principal != nil && *f.Principal != a.Principal || f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != kmsg.ACLOperationAny && f.Operation != a.Operation {
		return false
	}
	if f.Permission != kmsg.ACLPermissionTypeAny && f.Permission != a.Permission {
		return false
	}
	switch f.Pattern {
	case kmsg.ACLResourcePatternTypeAny:
		return f.Name == nil || *f.Name == a.ResourceName
	case kmsg.ACLResourcePatternTypeMatch:
		// The bindings that would apply to a resource of that name.
		return f.Name == nil || a.covers(*f.Name)
	default:
		return f.Pattern == a.PatternType && (f.Name == nil || *f.Name == a.ResourceName)
	}
}

// Validate checks a binding a client asked to create.
func (a Binding) Validate() error {
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
	if a.ResourceType == kmsg.ACLResourceTypeCluster && (a.ResourceName != ClusterResource || a.PatternType != kmsg.ACLResourcePatternTypeLiteral) {
		return fmt.Errorf("a CLUSTER ACL is on the LITERAL resource %q", ClusterResource)
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
