package broker

import (
	"fmt"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

// security is who may connect: the SASL users and the memory of failed
// logins that slows the next ones down.
type security struct {
	users    *auth.Store
	failures loginFailures
}

// newSecurity derives the configured users' credentials. It clears the
// broker's copy of the configured passwords: from here on only salted
// hashes are kept.
func newSecurity(b *Broker) (*security, error) {
	s := &security{users: auth.NewStore()}
	for i, u := range b.cfg.Users {
		creds, err := configCredentials(u)
		if err != nil {
			return nil, fmt.Errorf("config key \"Users[%d]\": %w", i, err)
		}
		for _, c := range creds {
			s.users.SetBase(u.Username, c)
		}
	}
	b.cfg.Users = nil
	if n := s.users.Len(); n > 0 {
		b.log.Info("SASL login required", "configured_users", n, "mechanisms", auth.Mechanisms)
	}
	return s, nil
}

// configCredentials turns a configured user into SCRAM credentials: a
// password becomes one credential per mechanism.
func configCredentials(u config.User) ([]auth.Credential, error) {
	var out []auth.Credential
	if u.Password != "" {
		for _, m := range auth.ScramMechanisms {
			c, err := auth.NewCredential(m, u.Password, auth.DefaultIterations)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	for j, sc := range u.Scram {
		c, err := sc.Credential()
		if err != nil {
			return nil, fmt.Errorf("Scram[%d]: %w", j, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// loginRequired reports whether clients must log in before anything but
// ApiVersions and SASL: as soon as one user exists.
func (b *Broker) loginRequired() bool { return b.sec.users.Len() > 0 }

// Failed logins from one address are answered ever more slowly, so guessing
// passwords costs time; the memory of them fades after failureMemory.
const (
	failureBaseDelay = 200 * time.Millisecond
	failureMaxDelay  = 5 * time.Second
	failureMemory    = 10 * time.Minute
	// failureMaxIPs bounds the table against a flood of source addresses.
	failureMaxIPs = 4096
)

type loginFailures struct {
	mu   sync.Mutex
	byIP map[string]failureRecord
}

type failureRecord struct {
	n    int
	last time.Time
}

// record notes a failed login from ip and returns how long to wait before
// answering it.
func (f *loginFailures) record(ip string, now time.Time) time.Duration {
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
