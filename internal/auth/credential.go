package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
)

// SASL mechanism names, as Kafka clients spell them.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms is what the broker offers in SaslHandshake, in that order.
var Mechanisms = []string{Plain, ScramSHA256, ScramSHA512}

// ScramMechanisms are the mechanisms a Credential can be for.
var ScramMechanisms = []string{ScramSHA256, ScramSHA512}

// Iteration bounds of a SCRAM credential. They are Kafka's: clients refuse
// fewer than 4096, and more than 16384 makes every login (and every PLAIN
// check) expensive enough to be a denial-of-service lever.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 4096
)

// saltBytes is the size of the random salts this package makes.
const saltBytes = 32

// maxSaltBytes bounds a salt supplied from outside (config,
// AlterUserScramCredentials); real salts are tens of bytes.
const maxSaltBytes = 1024

// Credential is a user's SCRAM credential for one mechanism: what RFC 5802
// lets a server keep instead of the password. StoredKey verifies a client's
// proof; ServerKey proves the server knew the credential.
type Credential struct {
	Mechanism  string
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// ScramMechanismCode is Kafka's wire number for a SCRAM mechanism (1 for
// SHA-256, 2 for SHA-512, as in DescribeUserScramCredentials), or 0 (Kafka's
// UNKNOWN) for anything else.
func ScramMechanismCode(mechanism string) int8 {
	switch mechanism {
	case ScramSHA256:
		return 1
	case ScramSHA512:
		return 2
	}
	return 0
}

// ScramMechanismName is the mechanism for a Kafka wire number; ok is false
// for numbers that are not a SCRAM mechanism.
func ScramMechanismName(code int8) (name string, ok bool) {
	switch code {
	case 1:
		return ScramSHA256, true
	case 2:
		return ScramSHA512, true
	}
	return "", false
}

func hashFor(mechanism string) (func() hash.Hash, error) {
	switch mechanism {
	case ScramSHA256:
		return sha256.New, nil
	case ScramSHA512:
		return sha512.New, nil
	}
	return nil, fmt.Errorf("%q is not a SCRAM mechanism (use %s or %s)", mechanism, ScramSHA256, ScramSHA512)
}

// HashSize is the size of StoredKey, ServerKey and salted passwords for a
// SCRAM mechanism, or 0 for anything else.
func HashSize(mechanism string) int {
	h, err := hashFor(mechanism)
	if err != nil {
		return 0
	}
	return h().Size()
}

// NewCredential derives a credential from a password with a fresh random
// salt. The password is not kept.
func NewCredential(mechanism, password string, iterations int) (Credential, error) {
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, err
	}
	return DeriveCredential(mechanism, password, salt, iterations)
}

// DeriveCredential derives the credential for a password and a given salt
// (RFC 5802: SaltedPassword = Hi(password, salt, i)).
func DeriveCredential(mechanism, password string, salt []byte, iterations int) (Credential, error) {
	h, err := hashFor(mechanism)
	if err != nil {
		return Credential{}, err
	}
	if err := checkIterations(iterations); err != nil {
		return Credential{}, err
	}
	if password == "" {
		return Credential{}, errors.New("the password is empty")
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return Credential{}, err
	}
	return FromSaltedPassword(mechanism, salt, salted, iterations)
}

// FromSaltedPassword builds a credential from an already salted password,
// which is what AlterUserScramCredentials carries. The salted password is
// not kept: it is as good as the password for logging in.
func FromSaltedPassword(mechanism string, salt, salted []byte, iterations int) (Credential, error) {
	h, err := hashFor(mechanism)
	if err != nil {
		return Credential{}, err
	}
	if len(salted) != h().Size() {
		return Credential{}, fmt.Errorf("a %s salted password has %d bytes, got %d", mechanism, h().Size(), len(salted))
	}
	c := Credential{
		Mechanism:  mechanism,
		Salt:       append([]byte(nil), salt...),
		Iterations: iterations,
		StoredKey:  hashOf(h, hmacOf(h, salted, []byte("Client Key"))),
		ServerKey:  hmacOf(h, salted, []byte("Server Key")),
	}
	return c, c.Validate()
}

// Validate checks a credential that came from outside (a config file, the
// internal users topic).
func (c Credential) Validate() error {
	h, err := hashFor(c.Mechanism)
	if err != nil {
		return err
	}
	if err := checkIterations(c.Iterations); err != nil {
		return err
	}
	if len(c.Salt) == 0 || len(c.Salt) > maxSaltBytes {
		return fmt.Errorf("the salt must have 1-%d bytes, got %d", maxSaltBytes, len(c.Salt))
	}
	if n := h().Size(); len(c.StoredKey) != n || len(c.ServerKey) != n {
		return fmt.Errorf("a %s StoredKey and ServerKey have %d bytes each, got %d and %d", c.Mechanism, n, len(c.StoredKey), len(c.ServerKey))
	}
	return nil
}

// matches reports whether password is the one the credential was derived
// from. It costs one PBKDF2 run.
func (c Credential) matches(password string) bool {
	d, err := DeriveCredential(c.Mechanism, password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	return hmac.Equal(d.StoredKey, c.StoredKey)
}

func checkIterations(n int) error {
	if n < MinIterations || n > MaxIterations {
		return fmt.Errorf("iterations must be %d-%d, got %d", MinIterations, MaxIterations, n)
	}
	return nil
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

func hashOf(h func() hash.Hash, msg []byte) []byte {
	d := h()
	d.Write(msg)
	return d.Sum(nil)
}
