package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// usersTopic is the internal, compacted topic that holds the SCRAM
// credentials changed at runtime (AlterUserScramCredentials), so that they
// survive restarts and replicate like every other topic. It holds only
// salted hashes, and clients may not read it.
const usersTopic = "__moonmq_users"

// security is who may connect: the SASL users and the memory of failed
// logins that slows the next ones down.
type security struct {
	users    *auth.Store
	usersLog *stateLog
	failures loginFailures
	// tls is the client port's TLS configuration, nil for plaintext.
	tls *tls.Config

	acls       *auth.ACLs
	aclLog     *stateLog
	authorizer *auth.Authorizer

	limits connLimits
	quotas *quotas
}

// newSecurity derives the configured users' credentials. It clears the
// broker's copy of the configured passwords: from here on only salted
// hashes are kept.
func newSecurity(b *Broker) (*security, error) {
	s := &security{users: auth.NewStore()}
	s.limits.max, s.limits.perIP = b.cfg.MaxConnections, b.cfg.MaxConnectionsPerIP
	s.quotas = newQuotas(b.cfg.Quotas)
	var err error
	if s.tls, err = loadTLS(b.cfg.TLS); err != nil {
		return nil, err
	}
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
	s.usersLog = newStateLog(b, usersTopic, s.users.ResetOverrides, s.applyUserRecord)
	s.acls = auth.NewACLs()
	s.aclLog = newStateLog(b, aclsTopic, s.acls.Reset, s.acls.ApplyRecord)
	allowIfNone := b.cfg.AllowEveryoneIfNoAclFound == nil || *b.cfg.AllowEveryoneIfNoAclFound
	s.authorizer = auth.NewAuthorizer(s.acls, b.cfg.SuperUsers, allowIfNone)
	if s.tls != nil {
		b.log.Info("client port serves TLS", "mutual_tls", b.cfg.TLS.RequireClientCert, "client_ca", b.cfg.TLS.ClientCAFile)
	}
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
func (b *Broker) loginRequired() bool {
	b.refreshUsers()
	return b.sec.users.Len() > 0
}

// refreshUsers brings the users up to date with __moonmq_users.
func (b *Broker) refreshUsers() {
	if err := b.sec.usersLog.catchUp(); err != nil {
		b.log.Error("cannot read the users' credentials; logins use what was read before", "err", err)
	}
}

// userRecordKey and userRecordValue are the JSON of a __moonmq_users
// record: one record per user and mechanism, the latest wins. A deletion
// is a value with Deleted set rather than a tombstone, so that it keeps
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

func (s *security) applyUserRecord(r recordbatch.Record) error {
	var k userRecordKey
	if err := json.Unmarshal(r.Key, &k); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if k.V != 1 {
		return fmt.Errorf("record version %d is newer than this broker", k.V)
	}
	if r.Value == nil {
		// Not written by this version; a tombstone restores the base.
		s.users.Override(k.User, k.Mechanism, nil)
		return nil
	}
	var v userRecordValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	if v.Deleted {
		s.users.Override(k.User, k.Mechanism, nil)
		return nil
	}
	c := auth.Credential{Mechanism: k.Mechanism, Salt: v.Salt, Iterations: v.Iterations, StoredKey: v.StoredKey, ServerKey: v.ServerKey}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("credential of %q: %w", k.User, err)
	}
	s.users.Override(k.User, k.Mechanism, &c)
	return nil
}

func encodeUserRecord(user, mechanism string, c *auth.Credential, now time.Time) recordbatch.Record {
	key, _ := json.Marshal(userRecordKey{V: 1, User: user, Mechanism: mechanism})
	v := userRecordValue{Deleted: true}
	if c != nil {
		v = userRecordValue{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey}
	}
	val, _ := json.Marshal(v)
	return recordbatch.Record{Key: key, Value: val, Timestamp: now.UnixMilli()}
}

// writeStateRecords appends records to a broker-owned internal topic and
// waits until they are durable (and, replicated, committed).
func (b *Broker) writeStateRecords(ctx context.Context, name string, recs []recordbatch.Record) error {
	p, err := b.internalPartition(name, map[string]string{"cleanup.policy": "compact"})
	if err != nil {
		return err
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
	if err != nil {
		return err
	}
	end, err := b.appendOwn(p, batch)
	if err != nil {
		return err
	}
	return b.waitOwn(ctx, p, end)
}

// stateWriteError is the Kafka error for a failed writeStateRecords.
func stateWriteError(err error) int16 {
	switch {
	case errors.Is(err, errNotServing):
		return errNotLeaderOrFollower
	case errors.Is(err, errCommitTimeout):
		return errRequestTimedOut
	case errors.Is(err, errBelowMinISR):
		return errNotEnoughReplicas
	}
	return errKafkaStorageError
}

func (b *Broker) handleDescribeUserScramCredentials(r *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	b.refreshUsers()
	users := b.sec.users
	names := users.Users()
	if r.Users != nil {
		names = names[:0]
		for _, u := range r.Users {
			names = append(names, u.Name)
		}
	}
	count := map[string]int{}
	for _, n := range names {
		count[n]++
	}
	for _, name := range names {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = name
		creds := users.Credentials(name)
		switch {
		case count[name] > 1:
			res.ErrorCode = errDuplicateResource
			res.ErrorMessage = kmsg.StringPtr("user " + name + " is listed more than once in the request")
		case len(creds) == 0:
			res.ErrorCode = errResourceNotFound
			res.ErrorMessage = kmsg.StringPtr("no credentials for user " + name)
		}
		if res.ErrorCode == 0 {
			for _, c := range creds {
				info := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				info.Mechanism = auth.ScramMechanismCode(c.Mechanism)
				info.Iterations = int32(c.Iterations)
				res.CredentialInfos = append(res.CredentialInfos, info)
			}
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// handleAlterUserScramCredentials applies a user's changes all or nothing:
// one bad entry fails every change of that user, as in Kafka.
func (b *Broker) handleAlterUserScramCredentials(ctx context.Context, r *kmsg.AlterUserSCRAMCredentialsRequest, who string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	b.refreshUsers()
	type change struct {
		mech string
		cred *auth.Credential
	}
	var order []string
	changes := map[string][]change{}
	fails := map[string]struct {
		code int16
		msg  string
	}{}
	fail := func(user string, code int16, msg string) {
		if _, ok := fails[user]; !ok {
			fails[user] = struct {
				code int16
				msg  string
			}{code, msg}
		}
	}
	seen := map[[2]string]bool{}
	listed := map[string]bool{}
	note := func(user, mech string) bool {
		if !listed[user] {
			listed[user] = true
			order = append(order, user)
		}
		if user == "" {
			fail(user, errUnacceptableCredential, "the user name must not be empty")
			return false
		}
		if mech == "" {
			fail(user, errUnsupportedSaslMechanism, "unknown SCRAM mechanism (use 1 for SCRAM-SHA-256, 2 for SCRAM-SHA-512)")
			return false
		}
		if seen[[2]string{user, mech}] {
			fail(user, errDuplicateResource, mech+" of user "+user+" is changed more than once in the request")
			return false
		}
		seen[[2]string{user, mech}] = true
		return true
	}
	for _, d := range r.Deletions {
		mech, _ := auth.ScramMechanismName(d.Mechanism)
		if !note(d.Name, mech) {
			continue
		}
		if _, ok := b.sec.users.Lookup(d.Name, mech); !ok {
			fail(d.Name, errResourceNotFound, "user "+d.Name+" has no "+mech+" credential to delete")
			continue
		}
		changes[d.Name] = append(changes[d.Name], change{mech: mech})
	}
	for _, u := range r.Upsertions {
		mech, _ := auth.ScramMechanismName(u.Mechanism)
		if !note(u.Name, mech) {
			continue
		}
		c, err := auth.FromSaltedPassword(mech, u.Salt, u.SaltedPassword, int(u.Iterations))
		if err != nil {
			fail(u.Name, errUnacceptableCredential, err.Error())
			continue
		}
		changes[u.Name] = append(changes[u.Name], change{mech: mech, cred: &c})
	}
	now := time.Now()
	var recs []recordbatch.Record
	for _, user := range order {
		if _, failed := fails[user]; failed {
			continue
		}
		for _, c := range changes[user] {
			recs = append(recs, encodeUserRecord(user, c.mech, c.cred, now))
		}
	}
	var writeErr error
	if len(recs) > 0 {
		writeErr = b.writeStateRecords(ctx, usersTopic, recs)
		b.refreshUsers()
	}
	for _, user := range order {
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = user
		if f, failed := fails[user]; failed {
			res.ErrorCode, res.ErrorMessage = f.code, kmsg.StringPtr(f.msg)
		} else if writeErr != nil {
			res.ErrorCode, res.ErrorMessage = stateWriteError(writeErr), kmsg.StringPtr(writeErr.Error())
		} else {
			var what []string
			for _, c := range changes[user] {
				if c.cred == nil {
					what = append(what, "deleted "+c.mech)
				} else {
					what = append(what, "set "+c.mech)
				}
			}
			b.log.Info("user credentials changed", "user", user, "changes", what, "by", who)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
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
