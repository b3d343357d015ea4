package app_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

// throttles records the throttle times a client is told about.
type throttles struct {
	mu sync.Mutex
	ds []time.Duration
}

func (h *throttles) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.mu.Lock()
	h.ds = append(h.ds, d)
	h.mu.Unlock()
}

func (h *throttles) max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m time.Duration
	for _, d := range h.ds {
		m = max(m, d)
	}
	return m
}

func TestByteRateQuotas(t *testing.T) {
	in, lc := startLogged(t, withUsers(config.User{Username: "app", Password: "app-pw"}, config.User{Username: "bulk", Password: "bulk-pw"}),
		func(s *config.Server) {
			s.Quotas = &config.Quotas{ProducerByteRate: 2000, ConsumerByteRate: 2000,
				Principals: map[string]config.Quota{"User:bulk": {}}}
		})
	big := make([]byte, 200<<10)
	for _, user := range []string{"app", "bulk"} {
		h := &throttles{}
		cl := client(t, in.Addr(), kgo.SASL(mechanism(auth.ScramSHA256, user, user+"-pw")), kgo.WithHooks(h),
			kgo.DefaultProduceTopic("quota-"+user), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: big}).FirstErr(); err != nil {
			t.Fatalf("%s produces: %v", user, err)
		}
		switch got := h.max(); {
		case user == "app" && got <= 0:
			t.Fatalf("200 KiB against a 2000 B/s quota was not throttled")
		case user == "bulk" && got != 0:
			t.Fatalf("bulk (unlimited) was throttled %v", got)
		}
	}
	lc.waitFor("client throttled by its byte-rate quota", "principal=User:app", "kind=produce")
	// A consumer of the same principal is throttled on fetches too, and
	// still gets its records.
	h := &throttles{}
	got := consumeAll(t, in.Addr(), "quota-app", 1, kgo.SASL(mechanism(auth.ScramSHA256, "app", "app-pw")), kgo.WithHooks(h))
	if len(got[0].Value) != len(big) {
		t.Fatalf("read back %d bytes", len(got[0].Value))
	}
	if h.max() <= 0 {
		t.Fatal("fetching 200 KiB against a 2000 B/s quota was not throttled")
	}
	lc.waitFor("client throttled by its byte-rate quota", "principal=User:app", "kind=fetch")
}
