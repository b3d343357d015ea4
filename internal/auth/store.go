package auth

import (
	"crypto/rand"
	"sort"
	"sync"
)

// Store holds the users a broker accepts, in two layers: the base (the
// configuration file's users) and the overrides (changes made at runtime
// with AlterUserScramCredentials, which the broker persists). An override
// for a user and mechanism, including a deletion, wins over the base.
//
// A Store is safe for concurrent use.
type Store struct {
	mu   sync.RWMutex
	base map[string]map[string]Credential
	// over holds runtime changes; a nil credential is a deletion.
	over map[string]map[string]*Credential
	// users is how many users have at least one credential.
	users int

	// secret keys the fake salts answered for unknown users, so that a
	// SCRAM exchange does not reveal whether a name exists and the same
	// name always gets the same salt.
	secret [32]byte
}

// NewStore returns an empty store.
func NewStore() *Store {
	s := &Store{base: map[string]map[string]Credential{}, over: map[string]map[string]*Credential{}}
	_, _ = rand.Read(s.secret[:])
	return s
}

// SetBase sets a configured credential.
func (s *Store) SetBase(user string, c Credential) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.base[user]
	if m == nil {
		m = map[string]Credential{}
		s.base[user] = m
	}
	m[c.Mechanism] = c
	s.recount()
}

// Override records a runtime change for a user and mechanism: c replaces
// the credential, nil deletes it (also a configured one).
func (s *Store) Override(user, mechanism string, c *Credential) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.over[user]
	if m == nil {
		m = map[string]*Credential{}
		s.over[user] = m
	}
	m[mechanism] = c
	s.recount()
}

// ResetOverrides forgets every runtime change, before they are replayed
// from scratch.
func (s *Store) ResetOverrides() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over = map[string]map[string]*Credential{}
	s.recount()
}

// Lookup returns a user's credential for a SCRAM mechanism.
func (s *Store) Lookup(user, mechanism string) (Credential, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lookupLocked(user, mechanism)
}

func (s *Store) lookupLocked(user, mechanism string) (Credential, bool) {
	if m, ok := s.over[user]; ok {
		if c, ok := m[mechanism]; ok {
			if c == nil {
				return Credential{}, false
			}
			return *c, true
		}
	}
	c, ok := s.base[user][mechanism]
	return c, ok
}

// Credentials returns a user's credentials in mechanism order; none means
// the user does not exist.
func (s *Store) Credentials(user string) []Credential {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.credentialsLocked(user)
}

func (s *Store) credentialsLocked(user string) []Credential {
	var out []Credential
	for _, mech := range ScramMechanisms {
		if c, ok := s.lookupLocked(user, mech); ok {
			out = append(out, c)
		}
	}
	return out
}

// Users lists, sorted, every user with at least one credential.
func (s *Store) Users() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.usersLocked()
}

func (s *Store) usersLocked() []string {
	seen := map[string]bool{}
	for u := range s.base {
		seen[u] = true
	}
	for u := range s.over {
		seen[u] = true
	}
	out := make([]string, 0, len(seen))
	for u := range seen {
		if len(s.credentialsLocked(u)) > 0 {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// Len is the number of users; with none, the broker needs no login.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.users
}

func (s *Store) recount() { s.users = len(s.usersLocked()) }
