package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
)

// preAuthMaxFrame caps frames until a connection has logged in, so an
// anonymous peer cannot make the broker buffer MaxRequestBytes.
const preAuthMaxFrame = 512 << 10

// saslKey reports whether an API key is part of the login exchange.
func saslKey(key int16) bool { return key == 17 || key == 36 }

// allowedBeforeLogin is what an unauthenticated connection may send when
// users exist: the version probe and the login itself.
func allowedBeforeLogin(key int16) bool { return key == 18 || saslKey(key) }

// mustLogIn reports whether this connection is restricted to the login
// exchange.
func (cn *conn) mustLogIn() bool { return cn.user == "" && cn.s.b.loginRequired() }

// errLoginFailed ends a connection after a failed login has been answered
// (and logged); Kafka closes it too, and the client reports the answer.
var errLoginFailed = errors.New("SASL login failed")

// handleSASL answers SaslHandshake and SaslAuthenticate. A non-nil error
// closes the connection once the answers queued before it are written.
func (cn *conn) handleSASL(req protocol.Request) error {
	b := cn.s.b
	start := time.Now()
	answer := func(resp kmsg.Response) {
		p := &pending{hdr: req.Header, resp: resp, done: make(chan struct{})}
		b.stats.finished(req.Key, resp, time.Since(start))
		close(p.done)
		cn.enqueue(p)
	}
	switch r := req.Body.(type) {
	case *kmsg.SASLHandshakeRequest:
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = auth.Mechanisms
		if cn.user != "" || cn.session != nil {
			resp.ErrorCode = errIllegalSaslState
			answer(resp)
			return errors.New("SaslHandshake on a connection that already logged in or began to (re-authentication is not supported)")
		}
		b.refreshUsers()
		sess, err := b.sec.users.Start(r.Mechanism)
		if err != nil {
			resp.ErrorCode = errUnsupportedSaslMechanism
			answer(resp)
			cn.log.Warn("SASL login refused", "mechanism", r.Mechanism, "reason", err.Error(), "client_id", cn.client)
			return fmt.Errorf("unsupported SASL mechanism %q", r.Mechanism)
		}
		cn.session = sess
		// Version 0 is followed by bare SASL tokens, not SaslAuthenticate.
		cn.rawSASL = r.Version == 0
		answer(resp)
		return nil
	case *kmsg.SASLAuthenticateRequest:
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		if cn.session == nil {
			resp.ErrorCode = errIllegalSaslState
			msg := "SaslAuthenticate without a SaslHandshake first"
			if cn.user != "" {
				msg = "this connection has already logged in"
			}
			resp.ErrorMessage = &msg
			answer(resp)
			return errors.New(msg)
		}
		out, done, err := cn.session.Step(r.SASLAuthBytes)
		if err != nil {
			mech := cn.session.Mechanism()
			cn.loginFailed(err)
			resp.ErrorCode = errSaslAuthenticationFailed
			msg := "Authentication failed: invalid credentials with SASL mechanism " + mech
			if b.sec.users.Len() == 0 {
				msg += " (this broker has no users configured)"
			}
			resp.ErrorMessage = &msg
			answer(resp)
			return errLoginFailed
		}
		resp.SASLAuthBytes = out
		if done {
			cn.loggedIn()
		}
		answer(resp)
		return nil
	}
	return fmt.Errorf("not a SASL request: %s", kmsg.NameForKey(req.Key))
}

// rawSASLStep reads one bare SASL token, which is what a client sends after
// SaslHandshake v0, and answers with a bare token. Failure closes the
// connection without an answer, as Kafka does in this flow. more is false
// when the connection must end (err nil: the peer went away).
func (cn *conn) rawSASLStep(br *bufio.Reader) (more bool, err error) {
	var sz [4]byte
	if _, err := io.ReadFull(br, sz[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || cn.ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > preAuthMaxFrame {
		cn.s.b.stats.badFrames.Add(1)
		return false, fmt.Errorf("SASL token of %d bytes (limit %d)", n, preAuthMaxFrame)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(br, tok); err != nil {
		return false, fmt.Errorf("connection closed in the middle of a SASL token: %w", err)
	}
	out, done, err := cn.session.Step(tok)
	if err != nil {
		cn.loginFailed(err)
		return false, errLoginFailed
	}
	p := &pending{raw: out, isRaw: true, done: make(chan struct{})}
	close(p.done)
	if !cn.enqueue(p) {
		return false, nil
	}
	if done {
		cn.rawSASL = false
		cn.loggedIn()
	}
	return true, nil
}

func (cn *conn) loggedIn() {
	cn.user = cn.session.User()
	cn.log.Info("client logged in", "user", cn.user, "mechanism", cn.session.Mechanism(), "client_id", cn.client)
	cn.session = nil
}

// loginFailed logs a failed login and waits before it is answered; the
// wait grows with the failures from the same address.
func (cn *conn) loginFailed(err error) {
	delay := cn.s.b.sec.failures.Record(cn.ip(), time.Now())
	user := cn.session.User()
	if len(user) > 128 {
		user = user[:128] + "..."
	}
	cn.log.Warn("SASL login failed", "user", user, "mechanism", cn.session.Mechanism(),
		"reason", err.Error(), "delay", delay, "client_id", cn.client)
	cn.session = nil
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cn.ctx.Done():
	}
}

// aclPrincipal names the connection's user for logs and ACLs, in Kafka's
// "User:name" form: the SASL user, else the subject of a verified client
// certificate (as Kafka's SSL listeners do), else ANONYMOUS.
func (cn *conn) aclPrincipal() string {
	switch {
	case cn.user != "":
		return "User:" + cn.user
	case cn.certSubject != "":
		return "User:" + cn.certSubject
	}
	return "User:ANONYMOUS"
}

// ip is the peer's address without the port.
func (cn *conn) ip() string { return remoteIP(cn.c) }
