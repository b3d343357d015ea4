package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Errors a Session reports. A failed exchange wraps ErrAuthFailed with the
// reason, which is for the broker's log only: clients get a generic answer,
// so they cannot tell an unknown user from a wrong password.
var (
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
	ErrAuthFailed           = errors.New("authentication failed")
)

// Session is the server side of one SASL exchange.
type Session interface {
	// Step takes the client's next message and returns the server's
	// answer. done is true once the client is authenticated; an error
	// ends the exchange (and wraps ErrAuthFailed).
	Step(msg []byte) (answer []byte, done bool, err error)
	// User is the user name the client gave, "" before it gave one.
	User() string
	// Mechanism is the exchange's SASL mechanism.
	Mechanism() string
}

// Start begins an exchange for a mechanism named in SaslHandshake.
func (s *Store) Start(mechanism string) (Session, error) {
	switch mechanism {
	case Plain:
		return &plainSession{store: s}, nil
	case ScramSHA256, ScramSHA512:
		h, _ := hashFor(mechanism)
		return &scramSession{store: s, mech: mechanism, h: h, nonce: randomNonce}, nil
	}
	return nil, fmt.Errorf("%w %q (offered: %s)", ErrUnsupportedMechanism, mechanism, strings.Join(Mechanisms, ", "))
}

func failed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAuthFailed, fmt.Sprintf(format, args...))
}

// ---------------------------------------------------------------- PLAIN

// plainSession checks "authzid NUL authcid NUL password" (RFC 4616)
// against the user's SCRAM credentials: the store keeps no passwords.
type plainSession struct {
	store *Store
	user  string
	done  bool
}

func (p *plainSession) User() string      { return p.user }
func (p *plainSession) Mechanism() string { return Plain }

func (p *plainSession) Step(msg []byte) ([]byte, bool, error) {
	if p.done {
		return nil, false, failed("PLAIN takes one message")
	}
	p.done = true
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return nil, false, failed("malformed PLAIN message (want authzid NUL user NUL password)")
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	p.user = user
	if !utf8.ValidString(user) || user == "" {
		return nil, false, failed("empty or non-UTF-8 user name")
	}
	if authz != "" && authz != user {
		return nil, false, failed("authorization id %q differs from the user name", authz)
	}
	creds := p.store.Credentials(user)
	if len(creds) == 0 {
		// Spend what a real check costs, so response times do not
		// reveal which names exist.
		c := p.store.fakeCredential(ScramSHA256, user)
		c.matches(pass)
		return nil, false, failed("unknown user")
	}
	for _, c := range creds {
		if c.matches(pass) {
			return nil, true, nil
		}
	}
	return nil, false, failed("wrong password")
}

// ---------------------------------------------------------------- SCRAM

// scramSession is the server side of RFC 5802 without channel binding.
type scramSession struct {
	store *Store
	mech  string
	h     func() hash.Hash
	nonce func() string

	step int
	user string
	cred Credential
	// unknown is why the login must fail although the exchange goes on
	// (an unknown user gets a fake salt and fails at the proof).
	unknown string

	gs2             string
	clientFirstBare string
	serverFirst     string
	fullNonce       string
}

func (s *scramSession) User() string      { return s.user }
func (s *scramSession) Mechanism() string { return s.mech }

func (s *scramSession) Step(msg []byte) ([]byte, bool, error) {
	step := s.step
	s.step++
	switch step {
	case 0:
		out, err := s.clientFirst(string(msg))
		return out, false, err
	case 1:
		out, err := s.clientFinal(string(msg))
		return out, err == nil, err
	}
	return nil, false, failed("SCRAM exchange already finished")
}

// clientFirst reads gs2-header client-first-message-bare and answers
// r=nonce,s=salt,i=iterations.
func (s *scramSession) clientFirst(msg string) ([]byte, error) {
	if !utf8.ValidString(msg) {
		return nil, failed("client-first-message is not UTF-8")
	}
	// gs2-header: cbind-flag "," [authzid] ","
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return nil, failed("malformed client-first-message")
	}
	switch {
	case flag == "n", flag == "y":
	case strings.HasPrefix(flag, "p="):
		return nil, failed("channel binding is not supported")
	default:
		return nil, failed("malformed gs2 header")
	}
	authzPart, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, failed("malformed client-first-message")
	}
	var authz string
	if authzPart != "" {
		if !strings.HasPrefix(authzPart, "a=") {
			return nil, failed("malformed authorization id")
		}
		var err error
		if authz, err = decodeSaslName(authzPart[2:]); err != nil {
			return nil, err
		}
	}
	s.gs2 = flag + "," + authzPart + ","
	s.clientFirstBare = bare

	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 || strings.HasPrefix(attrs[0], "m=") {
		return nil, failed("malformed client-first-message-bare (or an unsupported mandatory extension)")
	}
	if !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, failed("client-first-message-bare must start with n= and r=")
	}
	user, err := decodeSaslName(attrs[0][2:])
	if err != nil {
		return nil, err
	}
	s.user = user
	clientNonce := attrs[1][2:]
	if clientNonce == "" || !printable(clientNonce) {
		return nil, failed("empty or non-printable client nonce")
	}
	for _, ext := range attrs[2:] {
		if ext == "tokenauth=true" {
			return nil, failed("delegation tokens are not supported")
		}
	}
	if user == "" {
		return nil, failed("empty user name")
	}
	if authz != "" && authz != user {
		return nil, failed("authorization id %q differs from the user name", authz)
	}
	if c, ok := s.store.Lookup(user, s.mech); ok {
		s.cred = c
	} else {
		s.cred = s.store.fakeCredential(s.mech, user)
		s.unknown = "unknown user or no " + s.mech + " credential"
	}
	s.fullNonce = clientNonce + s.nonce()
	s.serverFirst = "r=" + s.fullNonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.Salt) + ",i=" + strconv.Itoa(s.cred.Iterations)
	return []byte(s.serverFirst), nil
}

// clientFinal checks c=,r=,...,p= and answers v=ServerSignature.
func (s *scramSession) clientFinal(msg string) ([]byte, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, failed("client-final-message has no proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, failed("client-final-message must start with c= and r=")
	}
	cbind, err := base64.StdEncoding.DecodeString(attrs[0][2:])
	if err != nil || string(cbind) != s.gs2 {
		return nil, failed("channel binding data does not repeat the gs2 header")
	}
	// librdkafka (2.0 at least) sends its own nonce again in front of the
	// combined one; Kafka accepts any nonce that ends with the combined
	// one, and so do we. Freshness comes from our part, which is last.
	if !strings.HasSuffix(attrs[1][2:], s.fullNonce) {
		return nil, failed("nonce mismatch")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != len(s.cred.StoredKey) {
		return nil, failed("malformed client proof")
	}
	authMsg := []byte(s.clientFirstBare + "," + s.serverFirst + "," + withoutProof)
	// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage), and a
	// correct one hashes to StoredKey.
	clientKey := hmacOf(s.h, s.cred.StoredKey, authMsg)
	for j := range clientKey {
		clientKey[j] ^= proof[j]
	}
	good := hmac.Equal(hashOf(s.h, clientKey), s.cred.StoredKey)
	if s.unknown != "" {
		return nil, failed("%s", s.unknown)
	}
	if !good {
		return nil, failed("wrong password")
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(s.h, s.cred.ServerKey, authMsg))), nil
}

// decodeSaslName undoes RFC 5802's escaping of ',' and '=' in names.
func decodeSaslName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", failed("malformed escape in a SCRAM name")
		}
		i += 2
	}
	return b.String(), nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

func randomNonce() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawStdEncoding.EncodeToString(b)
}

// fakeCredential is a credential nobody can match, with a salt that is
// stable per name, answered for users that do not exist.
func (s *Store) fakeCredential(mechanism, user string) Credential {
	h, _ := hashFor(mechanism)
	salt := hmacOf(h, s.secret[:], []byte(mechanism+"\x00"+user))[:saltBytes]
	key := hmacOf(h, s.secret[:], []byte("no such user\x00"+mechanism+"\x00"+user))
	return Credential{Mechanism: mechanism, Salt: salt, Iterations: DefaultIterations, StoredKey: key, ServerKey: key}
}
