package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// TestAddressMapper checks that the mapper's addresses, and only those,
// replace the real ones in the written configurations.
func TestAddressMapper(t *testing.T) {
	c := New(t, WithBinary("/bin/false"), WithAddressMapper(func(l Link) string {
		if l.Kind == ReplicationLink && l.From == 1 {
			return "" // keeps the real address
		}
		return fmt.Sprintf("proxy:%d-%d-%d", l.Kind, l.From, l.To)
	}))
	for _, r := range c.Replicas {
		var cfg struct {
			Server struct {
				Replication struct {
					ClientAddress string
					Peers         []struct {
						Id                     int
						Address, ClientAddress string
					}
				}
			}
		}
		b, err := os.ReadFile(r.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		repl := cfg.Server.Replication
		if want := fmt.Sprintf("proxy:1-0-%d", r.ID); repl.ClientAddress != want {
			t.Errorf("replica %d: ClientAddress %q, want %q", r.ID, repl.ClientAddress, want)
		}
		for _, p := range repl.Peers {
			want := fmt.Sprintf("proxy:0-%d-%d", r.ID, p.Id)
			if r.ID == 1 {
				want = c.Replica(p.Id).ReplicateAddr()
			}
			if p.Address != want {
				t.Errorf("replica %d: peer %d Address %q, want %q", r.ID, p.Id, p.Address, want)
			}
			if want := fmt.Sprintf("proxy:1-0-%d", p.Id); p.ClientAddress != want {
				t.Errorf("replica %d: peer %d ClientAddress %q, want %q", r.ID, p.Id, p.ClientAddress, want)
			}
		}
	}
}

// TestTryStartReportsAFailedStart: a process that exits at once is an
// error, not a test failure, and the cleanup does not report it.
func TestTryStartReportsAFailedStart(t *testing.T) {
	c := New(t, WithBinary("/bin/false"), WithReplicas(1))
	if err := c.Replicas[0].TryStart(); err == nil {
		t.Fatal("a process that exits at once started")
	}
	if c.Replicas[0].Running() {
		t.Fatal("still running")
	}
}
