package config

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"

	"github.com/moonmq/moonmq/internal/auth"
)

// User is a SASL user: a Password, or pre-hashed SCRAM credentials for
// operators who do not want a password in the file.
type User struct {
	Username string
	// Password is turned into SCRAM-SHA-256 and SCRAM-SHA-512 credentials
	// when the broker starts; the broker keeps only those.
	Password string
	// Scram are pre-hashed credentials, one per mechanism, used instead of
	// Password.
	Scram []ScramCredential
}

// ScramCredential is a pre-hashed SCRAM credential (RFC 5802): what a
// server keeps instead of a password. Byte strings are standard base64.
type ScramCredential struct {
	// Mechanism is SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	Salt      string
	// Iterations is the PBKDF2 iteration count, 4096-16384.
	Iterations int
	StoredKey  string
	ServerKey  string
}

// Credential decodes and checks the credential.
func (c ScramCredential) Credential() (auth.Credential, error) {
	var out auth.Credential
	out.Mechanism, out.Iterations = c.Mechanism, c.Iterations
	for _, f := range []struct {
		name string
		in   string
		out  *[]byte
	}{{"Salt", c.Salt, &out.Salt}, {"StoredKey", c.StoredKey, &out.StoredKey}, {"ServerKey", c.ServerKey, &out.ServerKey}} {
		b, err := base64.StdEncoding.DecodeString(f.in)
		if err != nil {
			return out, fmt.Errorf("%s is not standard base64: %v", f.name, err)
		}
		*f.out = b
	}
	return out, out.Validate()
}

// TLS is the TLS configuration of the client port (Server.TLS), of the
// metrics port (Metrics.TLS) or of the replication port (Replication.TLS).
// Files are PEM.
//
// On the replication port every replica is both a server and a client of
// its peers, so the one block serves both sides: CertFile/KeyFile are the
// listener's certificate and, when a peer requires one, the client
// certificate; ClientCAFile is the group's CA, which verifies the peers'
// server certificates and (with RequireClientCert) their client
// certificates. One CA for the group keeps the replicas' blocks identical
// apart from their own certificate, which is what makes them agree.
type TLS struct {
	// CertFile is the broker's certificate chain, leaf first.
	CertFile string
	// KeyFile is the private key of the leaf certificate.
	KeyFile string
	// ClientCAFile holds the CAs that client certificates must chain to.
	// Set, a client certificate is verified when a client presents one.
	ClientCAFile string
	// RequireClientCert refuses clients without a valid certificate
	// (mutual TLS). Needs ClientCAFile.
	RequireClientCert bool
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string
}

// validate checks a TLS block given under key (with what names the port
// it serves, for the messages). The replication port adds its own rules
// (Replication.validate).
func (t *TLS) validate(key, what string, bad func(key, format string, args ...any)) {
	if t.CertFile == "" {
		bad(key+".CertFile", "must be set: the PEM certificate chain %s presents", what)
	}
	if t.KeyFile == "" {
		bad(key+".KeyFile", "must be set: the PEM private key of the certificate in CertFile")
	}
	if t.RequireClientCert && t.ClientCAFile == "" {
		bad(key+".ClientCAFile", "must be set when RequireClientCert is true: it names the CAs client certificates must chain to")
	}
	switch t.MinVersion {
	case "", "1.2", "1.3":
	default:
		bad(key+".MinVersion", "%q must be 1.2 or 1.3", t.MinVersion)
	}
}

// Metrics is the Metrics block: what the metrics port serves and to whom.
// /health/* is always open, for probes; /metrics is open unless
// ProtectMetrics; everything else (the status page, /stats, profiles)
// needs the Token or the password once either is set.
type Metrics struct {
	// Pprof serves /debug/pprof: CPU profiles and execution traces on
	// demand, which cost the broker CPU while they run and show its code
	// and memory. Default false.
	Pprof bool
	// Token is a bearer token ("Authorization: Bearer <Token>") that
	// opens the protected endpoints; "" for none.
	Token string
	// Username and Password are HTTP basic credentials that open them
	// as the Token does: what a browser can send for the status page.
	Username string
	Password string
	// ProtectMetrics puts /metrics behind the Token or the password too;
	// by default it stays open for scrapers.
	ProtectMetrics bool
	// TLS serves the metrics port over HTTPS; nil is plain HTTP. Its keys
	// are Server.TLS's.
	TLS *TLS
}

// HasLogin reports whether the block sets a Token or a password.
func (m *Metrics) HasLogin() bool {
	return m != nil && (m.Token != "" || m.Username != "")
}

// validateMetrics checks the Metrics block, and warns when the metrics
// port listens beyond this machine without a login.
func (s *Server) validateMetrics(bad func(key, format string, args ...any)) {
	m := s.Metrics
	if m != nil {
		switch {
		case m.Username != "" && m.Password == "":
			bad("Metrics.Password", "must be set with Metrics.Username")
		case m.Username == "" && m.Password != "":
			bad("Metrics.Username", "must be set with Metrics.Password")
		}
		if strings.Contains(m.Username, ":") {
			bad("Metrics.Username", "%q must not contain a colon: HTTP basic credentials cannot carry it", m.Username)
		}
		if m.ProtectMetrics && !m.HasLogin() {
			bad("Metrics.ProtectMetrics", "needs Metrics.Token or Metrics.Username/Password: it puts /metrics behind them")
		}
		if m.TLS != nil {
			m.TLS.validate("Metrics.TLS", "the metrics port", bad)
		}
	}
	if s.MetricsPort != 0 && !m.HasLogin() && !LoopbackHost(s.MetricsHost) {
		slog.Warn("the metrics port listens beyond this machine without a login: anyone who reaches it can read /stats (every topic) and the status page; set Metrics.Token (or Metrics.Username/Password), or bind MetricsHost to 127.0.0.1",
			"key", "Metrics.Token", "MetricsHost", s.MetricsHost, "pprof", m != nil && m.Pprof)
	}
}

// Quotas are KIP-13 byte-rate quotas: a principal over its rate gets
// answers with a throttle time and its connection is paused for that long.
type Quotas struct {
	// ProducerByteRate is every principal's produce rate in bytes per
	// second, unless Principals says otherwise; 0 is unlimited.
	ProducerByteRate int64
	// ConsumerByteRate is every principal's fetch rate in bytes per
	// second, unless Principals says otherwise; 0 is unlimited.
	ConsumerByteRate int64
	// Principals overrides both rates for principals ("User:app",
	// "User:ANONYMOUS").
	Principals map[string]Quota
}

// Quota is one principal's byte rates; 0 is unlimited.
type Quota struct {
	ProducerByteRate int64
	ConsumerByteRate int64
}

// validateSecurity checks the users, TLS, metrics port, authorization and
// connection limit keys.
func (s *Server) validateSecurity(bad func(key, format string, args ...any)) {
	seenUser := map[string]bool{}
	for i, u := range s.Users {
		key := fmt.Sprintf("Users[%d]", i)
		if u.Username == "" {
			bad(key+".Username", "must not be empty")
		}
		if seenUser[u.Username] {
			bad(key+".Username", "%q is listed twice", u.Username)
		}
		seenUser[u.Username] = true
		switch {
		case u.Password == "" && len(u.Scram) == 0:
			bad(key+".Password", "must not be empty (or give pre-hashed credentials in Scram)")
		case u.Password != "" && len(u.Scram) > 0:
			bad(key, "give Password or Scram, not both")
		}
		seenMech := map[string]bool{}
		for j, c := range u.Scram {
			ckey := fmt.Sprintf("%s.Scram[%d]", key, j)
			if _, err := c.Credential(); err != nil {
				bad(ckey, "%v", err)
			}
			if seenMech[c.Mechanism] {
				bad(ckey+".Mechanism", "%s is listed twice for %q", c.Mechanism, u.Username)
			}
			seenMech[c.Mechanism] = true
		}
	}
	if t := s.TLS; t != nil {
		t.validate("TLS", "the client port", bad)
	}
	s.validateMetrics(bad)
	for i, p := range s.SuperUsers {
		if name, ok := strings.CutPrefix(p, "User:"); !ok || name == "" {
			bad(fmt.Sprintf("SuperUsers[%d]", i), "%q must be a principal such as \"User:admin\"", p)
		}
	}
	if s.MaxConnections < 0 {
		bad("MaxConnections", "%d must not be negative (0 is unlimited)", s.MaxConnections)
	}
	if s.MaxConnectionsPerIP < 0 {
		bad("MaxConnectionsPerIP", "%d must not be negative (0 is unlimited)", s.MaxConnectionsPerIP)
	}
	if q := s.Quotas; q != nil {
		if q.ProducerByteRate < 0 {
			bad("Quotas.ProducerByteRate", "%d must not be negative (0 is unlimited)", q.ProducerByteRate)
		}
		if q.ConsumerByteRate < 0 {
			bad("Quotas.ConsumerByteRate", "%d must not be negative (0 is unlimited)", q.ConsumerByteRate)
		}
		for p, pq := range q.Principals {
			key := fmt.Sprintf("Quotas.Principals[%q]", p)
			if name, ok := strings.CutPrefix(p, "User:"); !ok || name == "" {
				bad(key, "must be a principal such as \"User:app\"")
			}
			if pq.ProducerByteRate < 0 || pq.ConsumerByteRate < 0 {
				bad(key, "rates must not be negative (0 is unlimited)")
			}
		}
	}
}
