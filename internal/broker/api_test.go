package broker

import (
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
