package broker

import (
	"crypto/tls"
	"fmt"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
)

// usersTopic is the internal, compacted topic that holds the SCRAM
// credentials changed at runtime (AlterUserScramCredentials), so that they
// survive restarts and replicate like every other topic. It holds only
// salted hashes, and clients may not read it.
const usersTopic = "__moonmq_users"

// aclsTopic is the internal, compacted topic that holds the ACLs, one
// record per binding (auth.ACLRecord).
const aclsTopic = "__moonmq_acls"

// security is who may connect and what they may do: internal/auth's
// state and policy, and the state logs that persist users and ACLs.
type security struct {
	users    *auth.Store
	usersLog *stateLog
	failures auth.LoginFailures
	// tls is the client port's TLS configuration, nil for plaintext.
	tls *tls.Config

	acls       *auth.ACLs
	aclLog     *stateLog
	authorizer *auth.Authorizer

	limits auth.ConnLimits
	// quotas is nil without a Quotas block.
	quotas *auth.Quotas
}

// newSecurity derives the configured users' credentials. It clears the
// broker's copy of the configured passwords: from here on only salted
// hashes are kept.
func newSecurity(b *Broker) (*security, error) {
	s := &security{users: auth.NewStore()}
	s.limits.Max, s.limits.PerIP = b.cfg.MaxConnections, b.cfg.MaxConnectionsPerIP
	s.quotas = newQuotas(b.cfg.Quotas)
	var err error
	if s.tls, err = auth.LoadListenerTLS((*auth.TLSFiles)(b.cfg.TLS), "TLS"); err != nil {
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
	s.usersLog = newStateLog(b, usersTopic, s.users.ResetOverrides, s.users.ApplyRecord)
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

// refreshACLs brings the ACLs up to date with __moonmq_acls.
func (b *Broker) refreshACLs() {
	if err := b.sec.aclLog.catchUp(); err != nil {
		b.log.Error("cannot read the ACLs; authorization uses what was read before", "err", err)
	}
}
