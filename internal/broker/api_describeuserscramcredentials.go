package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeUserScramCredentials lists SCRAM users' mechanisms. A follower
// forwards it, and answers from its own copy when it cannot.
func init() {
	register(apiDef[*kmsg.DescribeUserSCRAMCredentialsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeUserSCRAMCredentialsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeUserScramCredentials(r), nil
		},
		authorize:   clusterDescribe[*kmsg.DescribeUserSCRAMCredentialsRequest],
		forwardable: forwardAlways[*kmsg.DescribeUserSCRAMCredentialsRequest],
	})
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
