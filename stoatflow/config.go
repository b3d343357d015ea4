package stoatflow

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Guarantee is the processing guarantee.
type Guarantee string

const (
	// ExactlyOnce commits output, changelog records and input positions in
	// one Kafka transaction (the default).
	ExactlyOnce Guarantee = "exactly-once"
	// AtLeastOnce produces, flushes, then commits positions: a crash can
	// repeat the records processed since the last commit, never lose one.
	AtLeastOnce Guarantee = "at-least-once"
)

// Config is the `stoatflow:` block. Zero values are filled by Defaults;
// LoadConfig reads it from YAML and STOATFLOW__* environment variables.
type Config struct {
	ApplicationID       string
	BootstrapServers    []string
	ProcessingGuarantee Guarantee
	// CommitInterval is how often the active instance commits. Under
	// exactly-once it bounds how long output waits before a read_committed
	// consumer sees it.
	CommitInterval time.Duration
	// Threads is the number of goroutines that process tasks (default 2).
	// Tasks of different partitions then run side by side, so the
	// functions given to the DSL and processors sharing anything across
	// partitions must be safe for concurrent use (as with Kafka Streams'
	// num.stream.threads above 1). Processing within a task stays in
	// order on one goroutine at a time.
	Threads int
	// ReplicationFactor of the internal topics StoatFlow creates (-1: the
	// broker's default).
	ReplicationFactor int

	State StateConfig
	HTTP  HTTPConfig
	HA    HAConfig
	SASL  SASLConfig
	TLS   TLSConfig
}

// StateConfig is `stoatflow.state`.
type StateConfig struct {
	Dir string
	// SegmentCheckpointRecords and SegmentCheckpointInterval bound how much
	// of the changelog a restart replays: the local stores are flushed
	// (with their changelog offsets) after that many applied records or
	// that much time, whichever comes first.
	SegmentCheckpointRecords  int64
	SegmentCheckpointInterval time.Duration
	// CacheMaxKeys turns on the table cache (0, the default: off). A
	// table (an aggregation, or a topic read as a table) then forwards
	// only the latest change of each key per commit, as Kafka Streams'
	// record cache does, holding at most this many keys per task before
	// it forwards them early. Off, every update is forwarded.
	CacheMaxKeys int
}

// HTTPConfig is `stoatflow.http`.
type HTTPConfig struct {
	Host string
	// Port of the health, metrics and interactive-query endpoints; 0
	// picks a free port (logged at start), -1 turns the server off.
	Port int
}

// HAConfig is `stoatflow.ha`.
type HAConfig struct {
	Mode                  string // off | active-standby
	DesiredStandbys       int
	MaxStandbys           int
	PodID                 string
	CoordinationTopic     string
	Heartbeat             time.Duration
	StalenessMisses       int
	AcceptableRecoveryLag int64
	FailoverPriority      int
	PromotionGrace        time.Duration
}

// SASLConfig is `stoatflow.sasl`.
type SASLConfig struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: none
	Username  string
	Password  string
}

// TLSConfig is `stoatflow.tls`.
type TLSConfig struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// Defaults returns the configuration every unset key falls back to.
func Defaults() Config {
	return Config{
		BootstrapServers:    []string{"127.0.0.1:9092"},
		ProcessingGuarantee: ExactlyOnce,
		Threads:             2,
		ReplicationFactor:   -1,
		State: StateConfig{
			Dir:                       "/tmp/stoatflow",
			SegmentCheckpointRecords:  100000,
			SegmentCheckpointInterval: 30 * time.Second,
		},
		HTTP: HTTPConfig{Port: 8080},
		HA: HAConfig{
			Mode:            "off",
			DesiredStandbys: 1,
			MaxStandbys:     3,
			// Failover within about a second: the active heartbeats every
			// 200 ms and is declared dead after 4 missed beats (800 ms).
			Heartbeat:             200 * time.Millisecond,
			StalenessMisses:       4,
			AcceptableRecoveryLag: 10000,
			PromotionGrace:        5 * time.Second,
		},
	}
}

// field is one configuration key: its dotted path under `stoatflow:` and
// how a scalar text sets it.
type field struct {
	path string
	set  func(c *Config, v string) error
}

func str(p func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func integer(p func(*Config) *int, min int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		*p(c) = n
		return nil
	}
}

func int64v(p func(*Config) *int64, min int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		*p(c) = n
		return nil
	}
}

func millis(p func(*Config) *time.Duration, min int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number of milliseconds", v)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		*p(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

func boolean(p func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*p(c) = b
		return nil
	}
}

func oneOf(p func(*Config) *string, allowed ...string) func(*Config, string) error {
	return func(c *Config, v string) error {
		for _, a := range allowed {
			if v == a {
				*p(c) = v
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

var fields = []field{
	{"application-id", str(func(c *Config) *string { return &c.ApplicationID })},
	{"bootstrap-servers", func(c *Config, v string) error {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return errors.New("no address given")
		}
		c.BootstrapServers = out
		return nil
	}},
	{"processing-guarantee", func(c *Config, v string) error {
		switch Guarantee(v) {
		case ExactlyOnce, AtLeastOnce:
			c.ProcessingGuarantee = Guarantee(v)
			return nil
		}
		return fmt.Errorf("%q is not exactly-once or at-least-once", v)
	}},
	{"commit-interval-ms", millis(func(c *Config) *time.Duration { return &c.CommitInterval }, 1)},
	{"threads", integer(func(c *Config) *int { return &c.Threads }, 1)},
	{"replication-factor", integer(func(c *Config) *int { return &c.ReplicationFactor }, -1)},
	{"state.dir", str(func(c *Config) *string { return &c.State.Dir })},
	{"state.segment-checkpoint-records", int64v(func(c *Config) *int64 { return &c.State.SegmentCheckpointRecords }, 1)},
	{"state.segment-checkpoint-ms", millis(func(c *Config) *time.Duration { return &c.State.SegmentCheckpointInterval }, 1)},
	{"state.cache-max-keys", integer(func(c *Config) *int { return &c.State.CacheMaxKeys }, 0)},
	{"http.host", str(func(c *Config) *string { return &c.HTTP.Host })},
	{"http.port", integer(func(c *Config) *int { return &c.HTTP.Port }, -1)},
	{"ha.mode", oneOf(func(c *Config) *string { return &c.HA.Mode }, "off", "active-standby")},
	{"ha.desired-standbys", integer(func(c *Config) *int { return &c.HA.DesiredStandbys }, 1)},
	{"ha.max-standbys", integer(func(c *Config) *int { return &c.HA.MaxStandbys }, 1)},
	{"ha.pod-id", str(func(c *Config) *string { return &c.HA.PodID })},
	{"ha.coordination-topic", str(func(c *Config) *string { return &c.HA.CoordinationTopic })},
	{"ha.heartbeat-ms", millis(func(c *Config) *time.Duration { return &c.HA.Heartbeat }, 10)},
	{"ha.staleness-misses", integer(func(c *Config) *int { return &c.HA.StalenessMisses }, 1)},
	{"ha.acceptable-recovery-lag", int64v(func(c *Config) *int64 { return &c.HA.AcceptableRecoveryLag }, 0)},
	{"ha.failover-priority", integer(func(c *Config) *int { return &c.HA.FailoverPriority }, -1000000)},
	{"ha.promotion-grace-ms", millis(func(c *Config) *time.Duration { return &c.HA.PromotionGrace }, 0)},
	{"sasl.mechanism", oneOf(func(c *Config) *string { return &c.SASL.Mechanism }, "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")},
	{"sasl.username", str(func(c *Config) *string { return &c.SASL.Username })},
	{"sasl.password", str(func(c *Config) *string { return &c.SASL.Password })},
	{"tls.enabled", boolean(func(c *Config) *bool { return &c.TLS.Enabled })},
	{"tls.ca-file", str(func(c *Config) *string { return &c.TLS.CAFile })},
	{"tls.cert-file", str(func(c *Config) *string { return &c.TLS.CertFile })},
	{"tls.key-file", str(func(c *Config) *string { return &c.TLS.KeyFile })},
	{"tls.server-name", str(func(c *Config) *string { return &c.TLS.ServerName })},
	{"tls.insecure-skip-verify", boolean(func(c *Config) *bool { return &c.TLS.InsecureSkipVerify })},
}

func lookupField(path string) *field {
	for i := range fields {
		if fields[i].path == path {
			return &fields[i]
		}
	}
	return nil
}

// envName is the environment variable that overrides a key:
// "ha.desired-standbys" is STOATFLOW__HA__DESIRED_STANDBYS.
func envName(path string) string {
	return "STOATFLOW__" + strings.ToUpper(strings.NewReplacer(".", "__", "-", "_").Replace(path))
}

// LoadConfig reads the `stoatflow:` block of a YAML file (path may be empty
// for none), then applies STOATFLOW__* environment variables over it, then
// validates. Unknown keys, unknown STOATFLOW__ variables and bad values are
// refused with the key named.
func LoadConfig(path string) (Config, error) {
	return loadConfig(path, os.Environ())
}

func loadConfig(path string, environ []string) (Config, error) {
	c := Defaults()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("stoatflow config: %w", err)
		}
		if err := applyYAML(&c, data); err != nil {
			return c, fmt.Errorf("stoatflow config %s: %w", path, err)
		}
	}
	if err := applyEnv(&c, environ); err != nil {
		return c, err
	}
	return c, c.validate()
}

// ParseConfig is LoadConfig over YAML text instead of a file, without the
// environment.
func ParseConfig(data []byte) (Config, error) {
	c := Defaults()
	if err := applyYAML(&c, data); err != nil {
		return c, fmt.Errorf("stoatflow config: %w", err)
	}
	return c, c.validate()
}

func applyYAML(c *Config, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return errors.New("the file must be a mapping with a stoatflow: key")
	}
	found := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "stoatflow" {
			continue // other top-level blocks belong to the application
		}
		found = true
		if err := walkYAML(c, "", root.Content[i+1]); err != nil {
			return err
		}
	}
	if !found {
		return errors.New("no stoatflow: block")
	}
	return nil
}

func walkYAML(c *Config, prefix string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("stoatflow%s: expected a mapping", dotted(prefix))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		switch val.Kind {
		case yaml.MappingNode:
			if err := walkYAML(c, path, val); err != nil {
				return err
			}
			continue
		case yaml.SequenceNode:
			var parts []string
			for _, e := range val.Content {
				if e.Kind != yaml.ScalarNode {
					return fmt.Errorf("key stoatflow.%s: a list of plain values expected", path)
				}
				parts = append(parts, e.Value)
			}
			if err := setField(c, path, strings.Join(parts, ",")); err != nil {
				return err
			}
		case yaml.ScalarNode:
			if err := setField(c, path, val.Value); err != nil {
				return err
			}
		default:
			return fmt.Errorf("key stoatflow.%s: unsupported value", path)
		}
	}
	return nil
}

func dotted(p string) string {
	if p == "" {
		return ""
	}
	return "." + p
}

func setField(c *Config, path, v string) error {
	f := lookupField(path)
	if f == nil {
		return fmt.Errorf("unknown key stoatflow.%s (known keys: %s)", path, knownKeys())
	}
	if err := f.set(c, v); err != nil {
		return fmt.Errorf("key stoatflow.%s: %w", path, err)
	}
	return nil
}

func knownKeys() string {
	ks := make([]string, len(fields))
	for i, f := range fields {
		ks[i] = f.path
	}
	return strings.Join(ks, ", ")
}

func applyEnv(c *Config, environ []string) error {
	byEnv := map[string]*field{}
	for i := range fields {
		byEnv[envName(fields[i].path)] = &fields[i]
	}
	var names []string
	vals := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "STOATFLOW__") {
			names = append(names, k)
			vals[k] = v
		}
	}
	sort.Strings(names)
	for _, k := range names {
		f := byEnv[k]
		if f == nil {
			return fmt.Errorf("unknown environment variable %s (each key has one: %s for ha.mode, ...)", k, envName("ha.mode"))
		}
		if err := f.set(c, vals[k]); err != nil {
			return fmt.Errorf("%s (key stoatflow.%s): %w", k, f.path, err)
		}
	}
	return nil
}

func (c *Config) validate() error {
	if c.ApplicationID == "" {
		return fmt.Errorf("key stoatflow.application-id is required (or %s)", envName("application-id"))
	}
	for _, r := range c.ApplicationID {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("key stoatflow.application-id: %q may hold only letters, digits, '.', '_' and '-' (it names topics)", c.ApplicationID)
		}
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
		if c.ProcessingGuarantee == AtLeastOnce {
			c.CommitInterval = time.Second
		}
	}
	if c.HA.CoordinationTopic == "" {
		c.HA.CoordinationTopic = "__stoatflow_" + c.ApplicationID + "_ha"
	}
	if c.HA.PodID == "" {
		c.HA.PodID = os.Getenv("POD_NAME")
	}
	if c.HA.PodID == "" {
		c.HA.PodID, _ = os.Hostname()
	}
	if c.HA.MaxStandbys < c.HA.DesiredStandbys {
		return fmt.Errorf("key stoatflow.ha.max-standbys (%d) is below stoatflow.ha.desired-standbys (%d)", c.HA.MaxStandbys, c.HA.DesiredStandbys)
	}
	if c.SASL.Mechanism != "" && c.SASL.Username == "" {
		return fmt.Errorf("key stoatflow.sasl.username is required with stoatflow.sasl.mechanism %s", c.SASL.Mechanism)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("keys stoatflow.tls.cert-file and stoatflow.tls.key-file go together")
	}
	if c.State.Dir == "" {
		return errors.New("key stoatflow.state.dir must not be empty")
	}
	return nil
}

// tlsConfig builds the client TLS settings, or nil when TLS is off.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS.Enabled {
		return nil, nil
	}
	t := &tls.Config{ServerName: c.TLS.ServerName, InsecureSkipVerify: c.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.TLS.CAFile != "" {
		pem, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("key stoatflow.tls.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("key stoatflow.tls.ca-file: no certificate in %s", c.TLS.CAFile)
		}
		t.RootCAs = pool
	}
	if c.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("keys stoatflow.tls.cert-file/key-file: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
