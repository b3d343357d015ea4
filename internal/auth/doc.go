// Package auth owns the broker's security policy and state: users' SCRAM
// credentials, kept only salted and hashed (RFC 5802, RFC 7677), the store
// that answers "who is this user", and the server side of PLAIN and
// SCRAM-SHA-256/512 logins; the back-off after failed logins; the ACLs and
// the authorizer's decision (super users, DENY over ALLOW, what a resource
// no ACL names gets), as Kafka's StandardAuthorizer; the per-address
// connection limits; the byte-rate quotas and the throttle they ask for;
// the TLS configurations built from the config's files; and the check of
// the secrets the HTTP ports take (the replication and metrics ports'
// bearer tokens, the metrics port's password), always in constant time.
//
// It has no sockets, no storage and no Kafka request plumbing. The broker
// hands it the bytes a client sent, the address and principal of a
// connection and the resource a request names, and applies the answers to
// its connections and its API handlers. Users and ACLs are kept as records
// of the broker's internal topics: this package encodes and applies those
// records (internal/recordbatch), the broker writes and replays them. From
// franz-go's kmsg it takes only the ACL enums (operation, resource type,
// pattern, permission), which are both the wire values and the values in
// those records. Nothing here keeps a plain password beyond the call that
// derives a credential from it.
package auth
