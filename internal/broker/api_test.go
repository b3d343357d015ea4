package broker

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEveryAPIHasItsRules: each registered API that is dispatched has a
// handler and an ACL rule (an API without one would panic, or be served
// unchecked), and the versions table is exactly the registered APIs.
func TestEveryAPIHasItsRules(t *testing.T) {
	if len(apis) != len(versions) {
		t.Fatalf("%d APIs registered, %d in the versions table", len(apis), len(versions))
	}
	for key, a := range apis {
		name := kmsg.NameForKey(key)
		if kmsg.RequestForKey(key) == nil {
			t.Errorf("key %d is no Kafka API", key)
		}
		if a.versions.Min > a.versions.Max || a.versions.Min < 0 {
			t.Errorf("%s: versions %+v", name, a.versions)
		}
		if max := kmsg.RequestForKey(key).MaxVersion(); a.versions.Max > max {
			t.Errorf("%s: advertises v%d, kmsg knows up to v%d", name, a.versions.Max, max)
		}
		if a.byConnection {
			if a.serve != nil || a.authorize != nil || a.forwardable != nil {
				t.Errorf("%s: answered by the connection, yet has dispatch rules", name)
			}
			continue
		}
		if a.serve == nil || a.authorize == nil {
			t.Errorf("%s: serve %v, authorize %v: both are needed", name, a.serve != nil, a.authorize != nil)
		}
		if a.forwardNow != nil && a.forwardable == nil {
			t.Errorf("%s: forwardNow without forwardable", name)
		}
		if a.forwardFail != nil && a.forwardable == nil {
			t.Errorf("%s: forwardFail without forwardable", name)
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
