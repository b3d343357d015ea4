package broker

import (
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

var testNow = time.Unix(1700000000, 0)

func aclsOf(t *testing.T, bs ...aclBinding) *aclSet {
	t.Helper()
	s := newACLSet()
	for _, b := range bs {
		if err := validateBinding(b); err != nil {
			t.Fatalf("%v: %v", b, err)
		}
		if err := s.apply(encodeACLRecord(b, true, testNow)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestACLDecisions(t *testing.T) {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	allowB, denyB := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	s := aclsOf(t,
		aclBinding{resTopic, "orders-", pre, "User:alice", "*", opWrite, allowB},
		aclBinding{resTopic, "orders-secret", lit, "User:alice", "*", kmsg.ACLOperationAll, denyB},
		aclBinding{resTopic, "public", lit, "User:*", "*", opRead, allowB},
		aclBinding{resTopic, "lab", lit, "User:bob", "10.0.0.9", kmsg.ACLOperationAll, allowB},
		aclBinding{resTopic, "*", lit, "User:auditor", "*", opDescribeConfigs, allowB},
		aclBinding{resGroup, "g", lit, "User:alice", "*", opAlterConfigs, allowB},
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
	if err := s.apply(recordbatch.Record{Key: encodeACLRecord(aclBinding{resTopic, "public", lit, "User:*", "*", opRead, allowB}, false, testNow).Key}); err != nil {
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
		aclBinding{resTopic, "orders-", pre, "User:alice", "*", opWrite, allowB},
		aclBinding{resTopic, "orders-1", lit, "User:bob", "*", opRead, allowB},
		aclBinding{resTopic, "*", lit, "User:carol", "*", opRead, allowB},
		aclBinding{resGroup, "orders-1", lit, "User:bob", "*", opRead, allowB},
	)
	name := "orders-1"
	any := aclFilter{resourceType: kmsg.ACLResourceTypeAny, pattern: kmsg.ACLResourcePatternTypeAny, operation: kmsg.ACLOperationAny, permission: kmsg.ACLPermissionTypeAny}
	count := func(f aclFilter) int { return len(s.matching(f)) }
	if n := count(any); n != 4 {
		t.Errorf("ANY filter matched %d", n)
	}
	f := any
	f.resourceType, f.name, f.pattern = resTopic, &name, kmsg.ACLResourcePatternTypeMatch
	if n := count(f); n != 3 { // the prefixed, the literal and the wildcard
		t.Errorf("MATCH orders-1 matched %d, want 3", n)
	}
	f.pattern = lit
	if n := count(f); n != 1 {
		t.Errorf("LITERAL orders-1 matched %d, want 1", n)
	}
	f.pattern, f.name = kmsg.ACLResourcePatternTypeAny, nil
	bob := "User:bob"
	f.principal = &bob
	if n := count(f); n != 1 {
		t.Errorf("topics of User:bob matched %d, want 1", n)
	}
	bad := any
	bad.pattern = kmsg.ACLResourcePatternTypeUnknown
	if bad.validate() == nil {
		t.Error("an UNKNOWN pattern filter was accepted")
	}
}

func TestValidateBinding(t *testing.T) {
	lit := kmsg.ACLResourcePatternTypeLiteral
	ok := aclBinding{resTopic, "t", lit, "User:a", "*", opRead, kmsg.ACLPermissionTypeAllow}
	if err := validateBinding(ok); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*aclBinding){
		"principal":     func(a *aclBinding) { a.Principal = "alice" },
		"empty name":    func(a *aclBinding) { a.ResourceName = "" },
		"cluster name":  func(a *aclBinding) { a.ResourceType, a.ResourceName = resCluster, "c" },
		"op any":        func(a *aclBinding) { a.Operation = kmsg.ACLOperationAny },
		"permission":    func(a *aclBinding) { a.Permission = kmsg.ACLPermissionTypeAny },
		"pattern match": func(a *aclBinding) { a.PatternType = kmsg.ACLResourcePatternTypeMatch },
		"prefixed *":    func(a *aclBinding) { a.PatternType, a.ResourceName = kmsg.ACLResourcePatternTypePrefixed, "*" },
		"user resource": func(a *aclBinding) { a.ResourceType = kmsg.ACLResourceTypeUser },
		"host":          func(a *aclBinding) { a.Host = "" },
	} {
		a := ok
		mutate(&a)
		if validateBinding(a) == nil {
			t.Errorf("%s: accepted %v", name, a)
		}
	}
}

// TestSplitRunShapes: for every request whose list authorizeRequest splits,
// a refused entry comes back as its own answer entry, carrying its code,
// next to the served ones.
func TestSplitRunShapes(t *testing.T) {
	two := func(req kmsg.Request, field string) kmsg.Request {
		v := reflect.ValueOf(req).Elem().FieldByName(field)
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.Struct {
			for _, n := range []string{"Topic", "ResourceName"} {
				if f := e.FieldByName(n); f.IsValid() && f.Kind() == reflect.String {
					f.SetString("x")
				}
			}
			if f := e.FieldByName("ResourceType"); f.IsValid() {
				f.SetInt(2)
			}
			// Topic entries carry their codes per partition.
			if f := e.FieldByName("Partitions"); f.IsValid() && f.Kind() == reflect.Slice {
				f.Set(reflect.Append(reflect.MakeSlice(f.Type(), 0, 1), reflect.New(f.Type().Elem()).Elem()))
			}
		} else {
			e.SetString("x")
		}
		v.Set(reflect.Append(reflect.Append(reflect.MakeSlice(v.Type(), 0, 2), e), e))
		return req
	}
	cases := []struct {
		req           kmsg.Request
		field, rfield string
	}{
		{kmsg.NewPtrProduceRequest(), "Topics", "Topics"},
		{kmsg.NewPtrListOffsetsRequest(), "Topics", "Topics"},
		{kmsg.NewPtrOffsetForLeaderEpochRequest(), "Topics", "Topics"},
		{kmsg.NewPtrDeleteRecordsRequest(), "Topics", "Topics"},
		{kmsg.NewPtrDescribeProducersRequest(), "Topics", "Topics"},
		{kmsg.NewPtrCreateTopicsRequest(), "Topics", "Topics"},
		{&kmsg.DeleteTopicsRequest{Version: 6}, "Topics", "Topics"},
		{kmsg.NewPtrCreatePartitionsRequest(), "Topics", "Topics"},
		{kmsg.NewPtrDescribeConfigsRequest(), "Resources", "Resources"},
		{kmsg.NewPtrAlterConfigsRequest(), "Resources", "Resources"},
		{kmsg.NewPtrIncrementalAlterConfigsRequest(), "Resources", "Resources"},
		{kmsg.NewPtrTxnOffsetCommitRequest(), "Topics", "Topics"},
		{kmsg.NewPtrOffsetCommitRequest(), "Topics", "Topics"},
		{kmsg.NewPtrOffsetFetchRequest(), "Topics", "Topics"},
		{kmsg.NewPtrOffsetDeleteRequest(), "Topics", "Topics"},
		{kmsg.NewPtrDescribeGroupsRequest(), "Groups", "Groups"},
		{kmsg.NewPtrDeleteGroupsRequest(), "Groups", "Groups"},
	}
	for _, c := range cases {
		req := two(c.req, c.field)
		var served kmsg.Request
		resp, wait := splitRun(req, c.field, c.rfield, []int16{29, 0}, func(r kmsg.Request) (kmsg.Response, waitFunc) {
			served = r
			return denyAll(r, 0), nil
		})
		name := kmsg.NameForKey(req.Key())
		if wait != nil || resp == nil {
			t.Fatalf("%s: no answer", name)
		}
		if n := reflect.ValueOf(served).Elem().FieldByName(c.field).Len(); n != 1 {
			t.Errorf("%s: served %d entries, want 1", name, n)
		}
		list := reflect.ValueOf(resp).Elem().FieldByName(c.rfield)
		if list.Len() != 2 {
			t.Errorf("%s: answer has %d entries, want 2", name, list.Len())
			continue
		}
		if !hasCode(list.Index(1), 29) || hasCode(list.Index(0), 29) {
			t.Errorf("%s: the refused entry does not carry its code: %+v", name, list.Interface())
		}
	}
}

// hasCode reports whether some ErrorCode in v (recursively) is code.
func hasCode(v reflect.Value, code int16) bool {
	switch v.Kind() {
	case reflect.Struct:
		if f := v.FieldByName("ErrorCode"); f.IsValid() && f.Int() == int64(code) {
			return true
		}
		for i := 0; i < v.NumField(); i++ {
			if hasCode(v.Field(i), code) {
				return true
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if hasCode(v.Index(i), code) {
				return true
			}
		}
	}
	return false
}
