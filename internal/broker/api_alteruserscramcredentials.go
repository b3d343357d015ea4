package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// AlterUserScramCredentials creates and deletes SCRAM users; only the
// leader can, so a follower forwards it.
func init() {
	register(apiDef[*kmsg.AlterUserSCRAMCredentialsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, cn *conn, r *kmsg.AlterUserSCRAMCredentialsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			who := cn.aclPrincipal()
			return nil, func(ctx context.Context) kmsg.Response { return b.handleAlterUserScramCredentials(ctx, r, who) }
		},
		authorize: func(z *authz, r *kmsg.AlterUserSCRAMCredentialsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
			seen := map[string]bool{}
			add := func(user string) {
				if !seen[user] {
					seen[user] = true
					res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
					res.User, res.ErrorCode = user, errClusterAuthorizationFailed
					resp.Results = append(resp.Results, res)
				}
			}
			for _, d := range r.Deletions {
				add(d.Name)
			}
			for _, u := range r.Upsertions {
				add(u.Name)
			}
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.AlterUserSCRAMCredentialsRequest],
		onFollower:  securityOnFollower[*kmsg.AlterUserSCRAMCredentialsRequest],
		forwardFail: securityFail[*kmsg.AlterUserSCRAMCredentialsRequest],
	})
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
	now := b.clock.Now()
	var recs []recordbatch.Record
	for _, user := range order {
		if _, failed := fails[user]; failed {
			continue
		}
		for _, c := range changes[user] {
			recs = append(recs, auth.UserRecord(user, c.mech, c.cred, now))
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
