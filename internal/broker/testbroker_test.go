package broker

import (
	"testing"

	"github.com/moonmq/moonmq/internal/config"
)

// openTestBroker opens a single-node broker on a fresh directory, without
// a client listener; edits change the default config first.
func openTestBroker(t *testing.T, edits ...func(*config.Server)) *Broker {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	for _, edit := range edits {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
