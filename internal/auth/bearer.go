package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// BearerOK reports whether req may pass a port guarded by token: every
// request when token is empty (the port has none), else only one that
// carries "Authorization: Bearer <token>". The replication port and the
// metrics port check their tokens with it, so that every comparison is
// made the same way.
func BearerOK(req *http.Request, token string) bool {
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && SecretEqual(got, token)
}

// SecretEqual compares a secret a client sent with the configured one in
// constant time. Both are hashed first: subtle.ConstantTimeCompare returns
// at once for inputs of different lengths, which would tell a guesser the
// secret's length.
func SecretEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
