package auth

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

// Short names for the ACL vocabulary, as the broker's rules spell it.
const (
	opRead, opWrite, opDelete, opDescribe = kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe
	opDescribeConfigs, opAlterConfigs     = kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs
	resTopic, resGroup, resCluster        = kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster
)

var testNow = time.Unix(1700000000, 0)

func aclsOf(t *testing.T, bs ...Binding) *ACLs {
	t.Helper()
	s := NewACLs()
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			t.Fatalf("%v: %v", b, err)
		}
		if err := s.ApplyRecord(ACLRecord(b, true, testNow)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestACLDecisions(t *testing.T) {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	allowB, denyB := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	s := aclsOf(t,
		Binding{resTopic, "orders-", pre, "User:alice", "*", opWrite, allowB},
		Binding{resTopic, "orders-secret", lit, "User:alice", "*", kmsg.ACLOperationAll, denyB},
		Binding{resTopic, "public", lit, "User:*", "*", opRead, allowB},
		Binding{resTopic, "lab", lit, "User:bob", "10.0.0.9", kmsg.ACLOperationAll, allowB},
		Binding{resTopic, "*", lit, "User:auditor", "*", opDescribeConfigs, allowB},
		Binding{resGroup, "g", lit, "User:alice", "*", opAlterConfigs, allowB},
	)
	cases := []struct {
		principal, host string
		op              kmsg.ACLOperation
		rt              kmsg.ACLResourceType
		name            string
		allowIfNone     bool
		want            bool
	}{
		{"User:alice", "1.2.3.4", opWrite, resTopic, "orders-1", false, true},
		{"User:alice", "1.2.3.4", opDescribe, resTopic, "orders-1", false, true}, // WRITE implies DESCRIBE
		{"User:alice", "1.2.3.4", opRead, resTopic, "orders-1", false, false},
		{"User:alice", "1.2.3.4", opWrite, resTopic, "orders-secret", true, false}, // DENY wins over the prefixed ALLOW
		{"User:bob", "1.2.3.4", opWrite, resTopic, "orders-1", true, false},        // named by an ACL: no fallback
		{"User:bob", "1.2.3.4", opRead, resTopic, "public", false, true},           // User:*
		{"User:bob", "1.2.3.4", opWrite, resTopic, "public", false, false},
		{"User:bob", "10.0.0.9", opDelete, resTopic, "lab", false, true},
		{"User:bob", "10.0.0.8", opDelete, resTopic, "lab", false, false}, // host mismatch
		{"User:auditor", "1.2.3.4", opDescribeConfigs, resTopic, "anything", false, true},
		{"User:alice", "1.2.3.4", opDescribeConfigs, resGroup, "g", false, true}, // ALTER_CONFIGS implies DESCRIBE_CONFIGS
		{"User:carol", "1.2.3.4", opRead, resGroup, "unnamed", true, true},       // no ACL for the resource
		{"User:carol", "1.2.3.4", opRead, resGroup, "unnamed", false, false},
	}
	for _, c := range cases {
		if got := s.authorize(c.principal, c.host, c.op, c.rt, c.name, c.allowIfNone); got != c.want {
			t.Errorf("%s@%s %s %s:%s (allowIfNone %v): %v, want %v", c.principal, c.host, c.op, c.rt, c.name, c.allowIfNone, got, c.want)
		}
	}
	// A tombstone deletes.
	if err := s.ApplyRecord(recordbatch.Record{Key: ACLRecord(Binding{resTopic, "public", lit, "User:*", "*", opRead, allowB}, false, testNow).Key}); err != nil {
		t.Fatal(err)
	}
	if s.authorize("User:bob", "1.2.3.4", opRead, resTopic, "public", false) {
		t.Error("a deleted ACL still allows")
	}
}

func TestACLFilters(t *testing.T) {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	allowB := kmsg.ACLPermissionTypeAllow
	s := aclsOf(t,
		Binding{resTopic, "orders-", pre, "User:alice", "*", opWrite, allowB},
		Binding{resTopic, "orders-1", lit, "User:bob", "*", opRead, allowB},
		Binding{resTopic, "*", lit, "User:carol", "*", opRead, allowB},
		Binding{resGroup, "orders-1", lit, "User:bob", "*", opRead, allowB},
	)
	name := "orders-1"
	any := Filter{ResourceType: kmsg.ACLResourceTypeAny, Pattern: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	count := func(f Filter) int { return len(s.Matching(f)) }
	if n := count(any); n != 4 {
		t.Errorf("ANY filter matched %d", n)
	}
	f := any
	f.ResourceType, f.Name, f.Pattern = resTopic, &name, kmsg.ACLResourcePatternTypeMatch
	if n := count(f); n != 3 { // the prefixed, the literal and the wildcard
		t.Errorf("MATCH orders-1 matched %d, want 3", n)
	}
	f.Pattern = lit
	if n := count(f); n != 1 {
		t.Errorf("LITERAL orders-1 matched %d, want 1", n)
	}
	f.Pattern, f.Name = kmsg.ACLResourcePatternTypeAny, nil
	bob := "User:bob"
	f.Principal = &bob
	if n := count(f); n != 1 {
		t.Errorf("topics of User:bob matched %d, want 1", n)
	}
	bad := any
	bad.Pattern = kmsg.ACLResourcePatternTypeUnknown
	if bad.Validate() == nil {
		t.Error("an UNKNOWN pattern filter was accepted")
	}
}

func TestValidateBinding(t *testing.T) {
	lit := kmsg.ACLResourcePatternTypeLiteral
	ok := Binding{resTopic, "t", lit, "User:a", "*", opRead, kmsg.ACLPermissionTypeAllow}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Binding){
		"principal":     func(a *Binding) { a.Principal = "alice" },
		"empty name":    func(a *Binding) { a.ResourceName = "" },
		"cluster name":  func(a *Binding) { a.ResourceType, a.ResourceName = resCluster, "c" },
		"op any":        func(a *Binding) { a.Operation = kmsg.ACLOperationAny },
		"permission":    func(a *Binding) { a.Permission = kmsg.ACLPermissionTypeAny },
		"pattern match": func(a *Binding) { a.PatternType = kmsg.ACLResourcePatternTypeMatch },
		"prefixed *":    func(a *Binding) { a.PatternType, a.ResourceName = kmsg.ACLResourcePatternTypePrefixed, "*" },
		"user resource": func(a *Binding) { a.ResourceType = kmsg.ACLResourceTypeUser },
		"host":          func(a *Binding) { a.Host = "" },
	} {
		a := ok
		mutate(&a)
		if a.Validate() == nil {
			t.Errorf("%s: accepted %v", name, a)
		}
	}
}
