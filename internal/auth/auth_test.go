package auth

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func storeWith(t *testing.T, user, pass string) *Store {
	t.Helper()
	s := NewStore()
	for _, m := range ScramMechanisms {
		c, err := NewCredential(m, pass, DefaultIterations)
		if err != nil {
			t.Fatal(err)
		}
		s.SetBase(user, c)
	}
	return s
}

// exchange runs franz-go's client mechanism against a server session the
// way the broker does (one SaslAuthenticate per client message) and
// returns the server's error, or the client's if the server was satisfied
// but the client was not.
func exchange(t *testing.T, s *Store, m sasl.Mechanism) (user string, err error) {
	t.Helper()
	sess, err := s.Start(m.Name())
	if err != nil {
		t.Fatal(err)
	}
	cs, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		answer, done, err := sess.Step(msg)
		if err != nil {
			return sess.User(), err
		}
		clientDone, next, cerr := cs.Challenge(answer)
		if cerr != nil {
			return sess.User(), errors.New("client rejected the server: " + cerr.Error())
		}
		if done != clientDone {
			t.Fatalf("server done=%v but client done=%v after step %d", done, clientDone, i)
		}
		if done {
			return sess.User(), nil
		}
		msg = next
	}
	t.Fatal("exchange did not finish in 5 steps")
	return "", nil
}

func TestFranzClientsLogIn(t *testing.T) {
	s := storeWith(t, "app", "s3cret")
	mechs := map[string]func(user, pass string) sasl.Mechanism{
		Plain: func(u, p string) sasl.Mechanism { return plain.Auth{User: u, Pass: p}.AsMechanism() },
		ScramSHA256: func(u, p string) sasl.Mechanism {
			return scram.Auth{User: u, Pass: p}.AsSha256Mechanism()
		},
		ScramSHA512: func(u, p string) sasl.Mechanism {
			return scram.Auth{User: u, Pass: p}.AsSha512Mechanism()
		},
	}
	for name, mk := range mechs {
		t.Run(name, func(t *testing.T) {
			user, err := exchange(t, s, mk("app", "s3cret"))
			if err != nil || user != "app" {
				t.Fatalf("good password: user %q, err %v", user, err)
			}
			if _, err := exchange(t, s, mk("app", "s3cret!")); !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), "wrong password") {
				t.Fatalf("wrong password: err %v, want ErrAuthFailed (wrong password)", err)
			}
			if _, err := exchange(t, s, mk("nobody", "s3cret")); !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), "unknown user") {
				t.Fatalf("unknown user: err %v, want ErrAuthFailed (unknown user)", err)
			}
		})
	}
}

// TestNamesNeedingEscapes: ',' and '=' in a user name travel escaped.
func TestNamesNeedingEscapes(t *testing.T) {
	s := storeWith(t, "a,b=c", "pw")
	if user, err := exchange(t, s, scram.Auth{User: "a,b=c", Pass: "pw"}.AsSha512Mechanism()); err != nil || user != "a,b=c" {
		t.Fatalf("user %q, err %v", user, err)
	}
}

// TestRFC7677Vector replays the SCRAM-SHA-256 example of RFC 7677 section 3.
func TestRFC7677Vector(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	c, err := DeriveCredential(ScramSHA256, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore()
	s.SetBase("user", c)
	sess, _ := s.Start(ScramSHA256)
	sess.(*scramSession).nonce = func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" }
	first, _, err := sess.Step([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; string(first) != want {
		t.Fatalf("server-first %q, want %q", first, want)
	}
	final, done, err := sess.Step([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if err != nil || !done {
		t.Fatalf("done %v, err %v", done, err)
	}
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; string(final) != want {
		t.Fatalf("server-final %q, want %q", final, want)
	}
}

func TestMalformedScram(t *testing.T) {
	s := storeWith(t, "app", "pw")
	for _, msg := range []string{
		"", "n", "n,,", "p=tls-unique,,n=app,r=abc", "n,,m=x,n=app,r=abc", "n,,r=abc,n=app",
		"n,,n=app,r=", "n,,n=a=2Xb,r=abc", "n,a=other,n=app,r=abc", "n,,n=app,r=abc,tokenauth=true",
		"\xff,,n=app,r=abc",
	} {
		sess, _ := s.Start(ScramSHA256)
		if _, _, err := sess.Step([]byte(msg)); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("client-first %q: err %v, want ErrAuthFailed", msg, err)
		}
	}
	// A final message must repeat the header and nonce and carry a proof.
	for _, final := range []string{"", "c=biws,r=abc", "c=eSws,r=%s,p=AAAA", "c=biws,r=wrong,p=AAAA", "c=biws,r=%s,p=!!"} {
		sess, _ := s.Start(ScramSHA256)
		first, _, err := sess.Step([]byte("n,,n=app,r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		nonce := strings.TrimPrefix(strings.Split(string(first), ",")[0], "r=")
		msg := strings.ReplaceAll(final, "%s", nonce)
		if _, _, err := sess.Step([]byte(msg)); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("client-final %q: err %v, want ErrAuthFailed", msg, err)
		}
		if _, _, err := sess.Step([]byte(msg)); err == nil {
			t.Errorf("a third step was accepted")
		}
	}
}

func TestMalformedPlain(t *testing.T) {
	s := storeWith(t, "app", "pw")
	for _, msg := range []string{"", "app\x00pw", "\x00app\x00pw\x00", "other\x00app\x00pw", "\x00\x00pw"} {
		sess, _ := s.Start(Plain)
		if _, done, err := sess.Step([]byte(msg)); !errors.Is(err, ErrAuthFailed) || done {
			t.Errorf("PLAIN %q: done %v, err %v; want ErrAuthFailed", msg, done, err)
		}
	}
	sess, _ := s.Start(Plain)
	if _, done, err := sess.Step([]byte("app\x00app\x00pw")); err != nil || !done {
		t.Fatalf("authzid equal to the user: done %v, err %v", done, err)
	}
}

func TestUnsupportedMechanism(t *testing.T) {
	if _, err := NewStore().Start("GSSAPI"); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Fatalf("err %v, want ErrUnsupportedMechanism", err)
	}
}

// TestUnknownUserLooksReal: the salt answered for a name that does not
// exist is stable, so two attempts cannot tell it from a real user.
func TestUnknownUserLooksReal(t *testing.T) {
	s := storeWith(t, "app", "pw")
	salt := func() string {
		sess, _ := s.Start(ScramSHA512)
		first, _, err := sess.Step([]byte("n,,n=ghost,r=abc"))
		if err != nil {
			t.Fatalf("client-first for an unknown user failed early: %v", err)
		}
		return strings.Split(string(first), ",")[1]
	}
	if a, b := salt(), salt(); a != b {
		t.Fatalf("unknown user got salts %s and %s", a, b)
	}
}

func TestOverrides(t *testing.T) {
	s := storeWith(t, "app", "old")
	if s.Len() != 1 {
		t.Fatalf("Len %d", s.Len())
	}
	c, _ := NewCredential(ScramSHA256, "new", DefaultIterations)
	s.Override("app", ScramSHA256, &c)
	if _, err := exchange(t, s, scram.Auth{User: "app", Pass: "new"}.AsSha256Mechanism()); err != nil {
		t.Fatalf("overridden credential: %v", err)
	}
	if _, err := exchange(t, s, scram.Auth{User: "app", Pass: "old"}.AsSha256Mechanism()); err == nil {
		t.Fatal("the configured credential still works after an override")
	}
	// PLAIN accepts a password matching any of the user's credentials.
	for _, pw := range []string{"old", "new"} {
		if _, err := exchange(t, s, plain.Auth{User: "app", Pass: pw}.AsMechanism()); err != nil {
			t.Fatalf("PLAIN with %q: %v", pw, err)
		}
	}
	s.Override("app", ScramSHA256, nil)
	s.Override("app", ScramSHA512, nil)
	if s.Len() != 0 || len(s.Users()) != 0 {
		t.Fatalf("after deleting both credentials: Len %d, Users %v", s.Len(), s.Users())
	}
	if _, err := exchange(t, s, plain.Auth{User: "app", Pass: "old"}.AsMechanism()); err == nil {
		t.Fatal("a deleted user logged in")
	}
	s.ResetOverrides()
	if got := s.Users(); len(got) != 1 || got[0] != "app" {
		t.Fatalf("after ResetOverrides: %v", got)
	}
}

func TestCredentialChecks(t *testing.T) {
	if _, err := NewCredential(ScramSHA256, "pw", 1000); err == nil {
		t.Error("1000 iterations accepted")
	}
	if _, err := NewCredential("SCRAM-SHA-1", "pw", 4096); err == nil {
		t.Error("SCRAM-SHA-1 accepted")
	}
	if _, err := NewCredential(ScramSHA256, "", 4096); err == nil {
		t.Error("empty password accepted")
	}
	c, _ := NewCredential(ScramSHA512, "pw", 4096)
	c.StoredKey = c.StoredKey[:10]
	if c.Validate() == nil {
		t.Error("short StoredKey accepted")
	}
	if _, err := FromSaltedPassword(ScramSHA256, []byte("salt"), make([]byte, 31), 4096); err == nil {
		t.Error("31-byte salted password accepted for SHA-256")
	}
	for code, name := range map[int8]string{1: ScramSHA256, 2: ScramSHA512} {
		if got, ok := ScramMechanismName(code); !ok || got != name || ScramMechanismCode(name) != code {
			t.Errorf("mechanism code %d: %q %v", code, got, ok)
		}
	}
}

// TestLibrdkafkaNonce: librdkafka repeats its nonce in front of the
// combined one in client-final-message; the proof covers what it sent.
func TestLibrdkafkaNonce(t *testing.T) {
	s := storeWith(t, "app", "pw")
	sess, _ := s.Start(ScramSHA256)
	first, _, err := sess.Step([]byte("n,,n=app,r=cnonce"))
	if err != nil {
		t.Fatal(err)
	}
	attrs := strings.Split(string(first), ",")
	nonce := strings.TrimPrefix(attrs[0], "r=")
	salt, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(attrs[1], "s="))
	withoutProof := "c=biws,r=cnonce" + nonce
	salted, _ := pbkdf2.Key(sha256.New, "pw", salt, DefaultIterations, sha256.Size)
	clientKey := hmacOf(sha256.New, salted, []byte("Client Key"))
	authMsg := "n=app,r=cnonce," + string(first) + "," + withoutProof
	proof := hmacOf(sha256.New, hashOf(sha256.New, clientKey), []byte(authMsg))
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	if _, done, err := sess.Step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))); err != nil || !done {
		t.Fatalf("librdkafka-style final message: done %v, err %v", done, err)
	}
}
