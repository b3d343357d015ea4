package auth

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

// userRecordKey and userRecordValue are the JSON of a users-topic record:
// one record per user and mechanism, the latest wins. A deletion is a
// value with Deleted set rather than a tombstone, so that it keeps
// overriding a configured credential after compaction.
type userRecordKey struct {
	V         int    `json:"v"`
	User      string `json:"user"`
	Mechanism string `json:"mechanism"`
}

type userRecordValue struct {
	Deleted    bool   `json:"deleted,omitempty"`
	Salt       []byte `json:"salt,omitempty"`
	Iterations int    `json:"iterations,omitempty"`
	StoredKey  []byte `json:"storedKey,omitempty"`
	ServerKey  []byte `json:"serverKey,omitempty"`
}

// UserRecord is the record that sets a user's credential for a mechanism
// (c) or deletes it (nil), as an override of the configured users.
func UserRecord(user, mechanism string, c *Credential, now time.Time) recordbatch.Record {
	key, _ := json.Marshal(userRecordKey{V: 1, User: user, Mechanism: mechanism})
	v := userRecordValue{Deleted: true}
	if c != nil {
		v = userRecordValue{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey}
	}
	val, _ := json.Marshal(v)
	return recordbatch.Record{Key: key, Value: val, Timestamp: now.UnixMilli()}
}

// ApplyRecord applies one record of the users topic (UserRecord) as an
// override.
func (s *Store) ApplyRecord(r recordbatch.Record) error {
	var k userRecordKey
	if err := json.Unmarshal(r.Key, &k); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if k.V != 1 {
		return fmt.Errorf("record version %d is newer than this broker", k.V)
	}
	if r.Value == nil {
		// Not written by this version; a tombstone restores the base.
		s.Override(k.User, k.Mechanism, nil)
		return nil
	}
	var v userRecordValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	if v.Deleted {
		s.Override(k.User, k.Mechanism, nil)
		return nil
	}
	c := Credential{Mechanism: k.Mechanism, Salt: v.Salt, Iterations: v.Iterations, StoredKey: v.StoredKey, ServerKey: v.ServerKey}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("credential of %q: %w", k.User, err)
	}
	s.Override(k.User, k.Mechanism, &c)
	return nil
}

// Failed logins from one address are answered ever more slowly, so guessing
// passwords costs time; the memory of them fades after failureMemory.
const (
	failureBaseDelay = 200 * time.Millisecond
	failureMaxDelay  = 5 * time.Second
	failureMemory    = 10 * time.Minute
	// failureMaxIPs bounds the table against a flood of source addresses.
	failureMaxIPs = 4096
)

// LoginFailures remembers failed logins per address, to slow the next
// ones down. The zero value is ready, and it is safe for concurrent use.
type LoginFailures struct {
	mu   sync.Mutex
	byIP map[string]failureRecord
}

type failureRecord struct {
	n    int
	last time.Time
}

// Record notes a failed login from ip and returns how long to wait before
// answering it.
func (f *LoginFailures) Record(ip string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byIP == nil {
		f.byIP = map[string]failureRecord{}
	}
	if len(f.byIP) >= failureMaxIPs {
		for k, r := range f.byIP {
			if now.Sub(r.last) > failureMemory {
				delete(f.byIP, k)
			}
		}
		if len(f.byIP) >= failureMaxIPs {
			// Still full: an attack from many addresses. Forgetting
			// everyone is safe (delays restart small) and bounded.
			clear(f.byIP)
		}
	}
	r := f.byIP[ip]
	if now.Sub(r.last) > failureMemory {
		r.n = 0
	}
	r.n++
	r.last = now
	f.byIP[ip] = r
	d := failureBaseDelay
	for i := 1; i < r.n && d < failureMaxDelay; i++ {
		d *= 2
	}
	return min(d, failureMaxDelay)
}
