package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/status"
)

// PathStatus is the broker's replication status endpoint.
const PathStatus = "/replication/status"

// PathStats is the metrics port's JSON statistics endpoint.
const PathStats = "/stats"

// StatusUsage is the usage text of `moonmq status`.
const StatusUsage = `usage: moonmq status [--config FILE] [--addr HOST:PORT] [--token T] [--cacert FILE [--cert FILE --key FILE]] [--metrics HOST:PORT] [--metrics-token T] [--metrics-cacert FILE] [--json] [--timeout D]

Prints a broker's replication status (GET /replication/status on its
replication port): role, leader, epoch, ISR, Raft term and commit index,
per-follower lag on a leader, log-shipping state on a follower. With
--config the addresses, the token and the replication port's TLS
(Replication.TLS) come from the broker's config file; flags override.
Without a config, --cacert asks a TLS replication port (https), and
--cert/--key give the client certificate a port with RequireClientCert
wants. On a broker without replication it prints the metrics port's
/stats instead. The metrics port's login and TLS (Metrics.Token or
Metrics.Username/Password, Metrics.TLS) come from the config too;
--metrics-token and --metrics-cacert give them without one.
`

// Status runs `moonmq status` and returns the process exit code: 0 when
// the broker answered, 1 when it could not be asked, 2 for bad usage.
func Status(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, StatusUsage); fs.PrintDefaults() }
	path := fs.String("config", "", "the broker's config file: replication address, token and metrics port")
	addr := fs.String("addr", "", "the replication port, HOST:PORT (default: Replication.ReplicateHost:ReplicatePort of --config)")
	token := fs.String("token", "", "the replication token (default: Replication.Token of --config)")
	metrics := fs.String("metrics", "", "the metrics port, HOST:PORT, for follower lag and single-node stats (default: from --config, else 127.0.0.1:9100)")
	cacert := fs.String("cacert", "", "PEM CA that signed the replication port's certificate; asks it over TLS (default: Replication.TLS.ClientCAFile of --config)")
	certFile := fs.String("cert", "", "PEM client certificate, for a replication port with RequireClientCert (default: Replication.TLS.CertFile of --config when it requires one)")
	keyFile := fs.String("key", "", "PEM private key of --cert")
	metricsToken := fs.String("metrics-token", "", "the metrics port's bearer token (default: Metrics.Token, or Metrics.Username/Password, of --config)")
	metricsCA := fs.String("metrics-cacert", "", "PEM CA that signed the metrics port's certificate; asks it over TLS (default: the system's CAs when --config has Metrics.TLS)")
	raw := fs.Bool("json", false, "print the status object as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the broker")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "moonmq status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	tokenSet, metricsTokenSet := false, false
	fs.Visit(func(f *flag.Flag) {
		tokenSet = tokenSet || f.Name == "token"
		metricsTokenSet = metricsTokenSet || f.Name == "metrics-token"
	})

	t := statusTarget{addr: *addr, token: *token, metrics: *metrics, scheme: "http", metricsScheme: "http"}
	t.metricsLogin.token = *metricsToken
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			fmt.Fprintln(stderr, "moonmq status:", err)
			return 2
		}
	}
	tc := tlsFiles{ca: *cacert, cert: *certFile, key: *keyFile, caFrom: "--cacert", certFrom: "--cert/--key"}
	if r := cfg.Replication; r != nil && r.Enabled {
		if t.addr == "" {
			t.addr = dialAddr(r.ReplicateHost, r.ReplicatePort)
		}
		if !tokenSet {
			t.token = r.Token
		}
		if rt := r.TLS; rt != nil {
			if tc.ca == "" {
				tc.ca, tc.caFrom = rt.ClientCAFile, "Replication.TLS.ClientCAFile of "+*path
			}
			// The broker's own certificate is its client certificate
			// towards its peers; it is loaded only where the port
			// requires one, as its key may not be readable by whoever
			// runs this.
			if rt.RequireClientCert && tc.cert == "" && tc.key == "" {
				tc.cert, tc.key, tc.certFrom = rt.CertFile, rt.KeyFile, "Replication.TLS.CertFile/KeyFile of "+*path
			}
		}
	}
	clientTLS, err := tc.load()
	if err != nil {
		fmt.Fprintln(stderr, "moonmq status:", err)
		return 2
	}
	if clientTLS != nil {
		t.scheme = "https"
	}
	if t.metrics == "" && cfg.MetricsPort != 0 {
		t.metrics = dialAddr(cfg.MetricsHost, cfg.MetricsPort)
	}
	mtc := tlsFiles{ca: *metricsCA, caFrom: "--metrics-cacert"}
	metricsTLS, err := mtc.load()
	if err != nil {
		fmt.Fprintln(stderr, "moonmq status:", err)
		return 2
	}
	if m := cfg.Metrics; m != nil {
		if !metricsTokenSet {
			t.metricsLogin = login{token: m.Token, user: m.Username, pass: m.Password}
		}
		if m.TLS != nil && metricsTLS == nil {
			// Its ClientCAFile is for client certificates, not the
			// server's: the system's CAs verify it.
			metricsTLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	if metricsTLS != nil {
		t.metricsScheme = "https"
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := clientFor(clientTLS)
	// The metrics port has TLS of its own.
	t.metricsClient = clientFor(metricsTLS)
	if t.addr == "" {
		why := "the default configuration has none; pass --config FILE, or --addr HOST:PORT --token T, to ask a replication group"
		if *path != "" {
			why = "no enabled Replication block in " + *path
		}
		return singleNode(ctx, t, why, *raw, stdout, stderr)
	}

	body, err := get(ctx, c, t.scheme, t.addr, PathStatus, login{token: t.token}, replicationPort)
	if err != nil {
		fmt.Fprintln(stderr, "moonmq status:", err)
		return 1
	}
	var d status.Replication
	if err := json.Unmarshal(body, &d); err != nil {
		fmt.Fprintf(stderr, "moonmq status: %s%s did not answer with a status object (%v): is it a MoonMQ replication port?\n", t.addr, PathStatus, err)
		return 1
	}
	if *raw {
		printJSON(stdout, body)
		return 0
	}
	v := StatusView{Doc: d, Now: time.Now()}
	if d.Role == "leader" && t.metrics != "" {
		// Best effort: without the leader's log ends the followers'
		// positions still print, only the lag is missing.
		if sb, err := get(ctx, t.metricsClient, t.metricsScheme, t.metrics, PathStats, t.metricsLogin, metricsPort); err == nil {
			var s status.Stats
			if json.Unmarshal(sb, &s) == nil {
				v.Logs = logRanges(s)
			}
		}
	}
	fmt.Fprintf(stdout, "replication status from %s\n", t.addr)
	FormatStatus(stdout, v)
	return 0
}

// port names a broker port in error messages, and says where its address
// comes from and what to pass when its login or TLS does not fit.
type port struct {
	name, from string
	// login is what to pass when it refuses the login.
	login string
	// tlsOn is what to pass when it serves TLS and was asked in plain
	// HTTP, tlsOff the reverse; ca names where the CA came from, cert
	// what to pass for a client certificate.
	tlsOn, tlsOff, ca, cert string
}

var (
	replicationPort = port{name: "replication port", from: "--addr, or Replication.ReplicatePort in --config",
		login:  "pass --token or --config (the broker's Replication.Token)",
		tlsOn:  "pass --cacert FILE (the CA of its certificate, the broker's Replication.TLS.ClientCAFile), or --config with the broker's Replication.TLS",
		tlsOff: "leave out --cacert/--cert, or check Replication.TLS in the config",
		ca:     "--cacert, or Replication.TLS.ClientCAFile of --config",
		cert:   "(Replication.TLS.RequireClientCert): pass --cert FILE --key FILE"}
	metricsPort = port{name: "metrics port", from: "--metrics, or Server.MetricsPort in --config",
		login:  "pass --metrics-token or --config (the broker's Metrics.Token or Metrics.Username/Password)",
		tlsOn:  "pass --config with the broker's Metrics.TLS, or --metrics-cacert FILE (the CA of its certificate)",
		tlsOff: "leave out --metrics-cacert, or check Metrics.TLS in the config",
		ca:     "--metrics-cacert, or the system's CAs",
		cert:   "(Metrics.TLS.RequireClientCert), which moonmq status cannot send: ask with curl --cert"}
)

type statusTarget struct {
	addr, token, metrics string
	// scheme of the replication port: https when it is asked over TLS.
	scheme string
	// The metrics port's scheme, login and client (its TLS is not the
	// replication port's).
	metricsScheme string
	metricsLogin  login
	metricsClient *http.Client
}

// login is what a request carries to a port that asks for one: a bearer
// token, or basic credentials.
type login struct{ token, user, pass string }

func (l login) set(req *http.Request) {
	switch {
	case l.token != "":
		req.Header.Set("Authorization", "Bearer "+l.token)
	case l.user != "":
		req.SetBasicAuth(l.user, l.pass)
	}
}

// clientFor is an HTTP client that uses tc for https URLs.
func clientFor(tc *tls.Config) *http.Client {
	c := &http.Client{}
	if tc != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		c.Transport = tr
	}
	return c
}

// tlsFiles are the PEM files for asking a TLS replication port, with where
// each came from (a flag or the config) for error messages.
type tlsFiles struct {
	ca, cert, key    string
	caFrom, certFrom string
}

// load builds the client TLS configuration, nil when no file is given
// (plain HTTP).
func (f tlsFiles) load() (*tls.Config, error) {
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("--cert and --key go together: the client certificate and its private key")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("the CA (%s): %w", f.caFrom, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA (%s): %s holds no PEM certificate", f.caFrom, f.ca)
		}
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("the client certificate (%s): %w", f.certFrom, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// singleNode reports a broker that runs without replication: what its
// metrics port says, or what to do when there is nothing to ask.
func singleNode(ctx context.Context, t statusTarget, why string, raw bool, stdout, stderr io.Writer) int {
	if t.metrics == "" {
		fmt.Fprintf(stderr, "moonmq status: replication is off (%s), and the metrics port is off (Server.MetricsPort 0): nothing to ask; pass --metrics HOST:PORT, or see partitions with `moonmq topic describe`\n", why)
		return 1
	}
	body, err := get(ctx, t.metricsClient, t.metricsScheme, t.metrics, PathStats, t.metricsLogin, metricsPort)
	if err != nil {
		fmt.Fprintf(stderr, "moonmq status: replication is off (%s); asking the metrics port instead: %v\n", why, err)
		return 1
	}
	var s status.Stats
	if err := json.Unmarshal(body, &s); err != nil {
		fmt.Fprintf(stderr, "moonmq status: %s%s did not answer with a stats object (%v): is it a MoonMQ metrics port?\n", t.metrics, PathStats, err)
		return 1
	}
	if raw {
		printJSON(stdout, body)
		return 0
	}
	if s.Replication != nil {
		// The broker does replicate after all (the config given is not
		// its own, or it was started with another one).
		fmt.Fprintf(stdout, "replication status from %s%s\n", t.metrics, PathStats)
		FormatStatus(stdout, StatusView{Doc: *s.Replication, Now: time.Now(), Logs: logRanges(s)})
		return 0
	}
	fmt.Fprintf(stdout, "replication: off (%s)\nbroker stats from %s%s:\n", why, t.metrics, PathStats)
	FormatStats(stdout, s)
	return 0
}

// get fetches scheme://addr+path and turns every failure into a sentence
// that says what to do.
func get(ctx context.Context, c *http.Client, scheme, addr, path string, l login, what port) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("bad address %q: %w (want HOST:PORT)", addr, err)
	}
	l.set(req)
	resp, err := c.Do(req)
	if err != nil {
		return nil, explainDial(err, addr, what)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s%s: %w", addr, path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("%s%s: wrong or missing token: %s", addr, path, what.login)
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s has no %s: is it the %s? (%s)", addr, path, what.name, what.from)
	case http.StatusBadRequest:
		if bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
			return nil, fmt.Errorf("the %s at %s serves TLS: %s", what.name, addr, what.tlsOn)
		}
	}
	return nil, fmt.Errorf("%s%s answered %s: %s", addr, path, resp.Status, bytes.TrimSpace(body))
}

func explainDial(err error, addr string, what port) error {
	var (
		ne   net.Error
		verr *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &verr):
		return fmt.Errorf("the certificate of %s is not trusted: %v (%s must be the CA that signed it, and the address must be a name or IP it carries)", addr, verr.Err, what.ca)
	// The server's alert reaches a TCP client as a "remote error" with
	// no exported type to match.
	case strings.Contains(err.Error(), "remote error: tls: certificate required"), strings.Contains(err.Error(), "remote error: tls: bad certificate"):
		return fmt.Errorf("%s refused the TLS handshake: it requires a client certificate signed by its CA %s (%v)", addr, what.cert, err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("the %s at %s serves plain HTTP, not TLS: %s (%s)", what.name, addr, what.tlsOff, what.from)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on %s: is the broker running? (or check its %s: %s)", addr, what.name, what.from)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%s did not answer in time: is the broker up, and is that its %s (%s)? --timeout waits longer", addr, what.name, what.from)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%s closed the connection without an HTTP answer: is it the %s? The Kafka client port is not (%s)", addr, what.name, what.from)
	}
	return fmt.Errorf("cannot ask %s: %w (check the %s: %s)", addr, err, what.name, what.from)
}

// dialAddr turns a listen address into one to dial: a wildcard host is this
// machine.
func dialAddr(host string, port int) string {
	switch host {
	case "", "0.0.0.0", "::", "[::]":
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// printJSON prints body indented, or as it came when it is not JSON.
func printJSON(w io.Writer, body []byte) {
	var out bytes.Buffer
	if json.Indent(&out, bytes.TrimSpace(body), "", "  ") != nil {
		_, _ = w.Write(body)
		return
	}
	out.WriteByte('\n')
	_, _ = out.WriteTo(w)
}
