// Package config owns MoonMQ's configuration: the JSON "Server" block of
// the configuration file (docs/CONFIG.md), its built-in defaults, and its
// validation.
//
// It may not open sockets or touch the data directory; it only turns bytes
// into a validated Config or an error that names the offending key.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
)

// File is the top level of a configuration file: everything lives under
// "Server", the file format docs/CONFIG.md describes.
type File struct {
	Server Server
}

// Server is the broker's configuration.
type Server struct {
	// Host is the address the client listener binds to.
	Host string
	// Port is the Kafka client port.
	Port int
	// AdvertisedAddress is the host:port clients are told to dial in
	// Metadata. Empty means Host:Port (or Replication.ClientAddress when
	// replication is enabled). It must be set when Host is a wildcard.
	AdvertisedAddress string
	// DataDir holds one directory per partition and the broker's state files.
	DataDir string
	// MetricsPort serves /stats, /metrics and /health/*; 0 disables it.
	MetricsPort int
	// MetricsHost is the address the metrics listener binds to (default Host).
	MetricsHost string
	// Metrics says who may read the metrics port and whether it serves
	// profiles; nil leaves it open, without profiles.
	Metrics *Metrics
	// Acks is the broker-side floor for produce acknowledgements: "all",
	// "leader" or "none". With "all" every produce waits for durability
	// whatever acks the client asked for.
	Acks string
	// AutoCreateTopics creates unknown topics on Metadata and Produce, as
	// Kafka's auto.create.topics.enable does. Default true.
	AutoCreateTopics *bool
	// DefaultPartitions is the partition count of auto-created topics and of
	// CreateTopics requests that ask for -1. Default 1.
	DefaultPartitions int
	// MaxRequestBytes is the largest frame a client may send (Kafka's
	// socket.request.max.bytes). Default 100 MiB.
	MaxRequestBytes int
	// QueuedMaxRequestBytes bounds the bytes of client requests being read
	// and handled across all connections (Kafka's
	// queued.max.request.bytes); when they are spent, connections stop
	// being read until memory is free. The bytes of fetch answers in flight
	// are bounded by the same amount. Default: a sixteenth of the machine's
	// memory (or cgroup limit), at most 128 MiB, and at least MaxRequestBytes.
	QueuedMaxRequestBytes int64
	// ConnectionsMaxIdleMs closes a client connection that sends nothing
	// for this long (Kafka's connections.max.idle.ms). Default 600000; -1
	// never closes idle connections.
	ConnectionsMaxIdleMs int64
	// RequestReadTimeoutMs bounds how long the rest of a request may take
	// to arrive once its size has been read, so a client that stops in the
	// middle of a frame does not hold a connection and its buffer forever.
	// Default 30000.
	RequestReadTimeoutMs int64
	// MaxMessageBytes is the default max.message.bytes of topics: the largest
	// record batch a produce may carry. Default 1048588 as in Kafka.
	MaxMessageBytes int
	// SegmentBytes is the default segment.bytes of topics. Default 1 GiB.
	SegmentBytes int64
	// RetentionMs is the default retention.ms of topics; -1 keeps forever.
	// Default 7 days.
	RetentionMs int64
	// RetentionBytes is the default retention.bytes per partition; -1 is
	// unlimited (the default).
	RetentionBytes int64
	// RetentionCheckMs is how often retention is enforced. Default 30000.
	RetentionCheckMs int64
	// MaxOpenSegmentFiles caps the descriptors held open for the files of
	// rolled segments, which are opened when read and closed least
	// recently used first. Every partition's active segment holds one
	// descriptor more, outside it. 0 (the default) picks a quarter of the
	// process's open-file limit, at least 64 (DefaultMaxOpenSegmentFiles).
	MaxOpenSegmentFiles int
	// MinFreeDiskBytes: while less than this is free on the data
	// directory's volume, appends (clients', replicas' and the broker's
	// own) are refused with KAFKA_STORAGE_ERROR and reads are served;
	// appends resume by themselves once twice as much (at least 1 MiB
	// more) is free. A write failing with ENOSPC does the same at once.
	// 0 (the default): 5% of the volume, at most 1 GiB; -1: no reserve.
	MinFreeDiskBytes int64
	// FsyncStallMs: an fsync running longer than this marks the disk as
	// stalled, and a leader whose disk stalls hands leadership to a
	// healthy in-sync replica; it counts as stalled until fsyncs have kept
	// under the bound for 10 s. Default 2000; -1 never.
	FsyncStallMs int64
	// OffsetsRetentionMinutes is Kafka's offsets.retention.minutes: the
	// committed offsets of a group that has had no member for this long
	// are deleted (tombstoned in __consumer_offsets), and so is the group.
	// Default 10080 (7 days); -1 keeps them forever.
	OffsetsRetentionMinutes int64
	// OffsetsRetentionCheckMs is how often expired offsets and empty groups
	// are looked for (Kafka's offsets.retention.check.interval.ms).
	// Default 600000.
	OffsetsRetentionCheckMs int64
	// ProducerIdExpirationMs is Kafka's producer.id.expiration.ms: a
	// partition forgets an idempotent producer that has written nothing to
	// it for this long (and has no open transaction there). Default
	// 86400000 (1 day).
	ProducerIdExpirationMs int64
	// ProducerIdExpirationCheckMs is how often idle producers are looked
	// for (producer.id.expiration.check.interval.ms). Default 600000.
	ProducerIdExpirationCheckMs int64
	// TransactionalIdExpirationMs is Kafka's
	// transactional.id.expiration.ms: a transactional id with no
	// transaction and no change for this long is deleted (a tombstone in
	// __transaction_state); its next InitProducerId gets a new producer
	// id. Default 604800000 (7 days).
	TransactionalIdExpirationMs int64
	// TransactionalIdExpirationCheckMs is how often idle transactional ids
	// are looked for (Kafka's
	// transaction.remove.expired.transaction.cleanup.interval.ms).
	// Default 3600000.
	TransactionalIdExpirationCheckMs int64
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string
	// Replication configures the replication group (docs/REPLICATION.md).
	Replication *Replication
	// Cluster joins this replication group to a cluster of groups that
	// split the partitions between them (docs/CLUSTER.md). It is being
	// built: it runs only with Experimental set.
	Cluster *Cluster
	// Users are the SASL users at start; runtime changes override them. With
	// at least one user, clients must log in (docs/SECURITY.md).
	Users []User
	// TLS serves the client port over TLS; nil serves plaintext.
	TLS *TLS
	// SuperUsers are principals ("User:name") that every ACL check lets
	// through.
	SuperUsers []string
	// AllowEveryoneIfNoAclFound decides for a resource that no ACL names:
	// true (the default) lets everyone through, false nobody but super
	// users, as Kafka's allow.everyone.if.no.acl.found.
	AllowEveryoneIfNoAclFound *bool
	// MaxConnections caps the client connections open at once; 0 (the
	// default) is unlimited.
	MaxConnections int
	// MaxConnectionsPerIP caps the client connections from one address;
	// 0 (the default) is unlimited.
	MaxConnectionsPerIP int
	// Quotas caps produce and fetch byte rates per principal; nil (the
	// default) is unlimited.
	Quotas *Quotas
}

// Replication is the Replication block: a group of replicas that each hold
// a copy of every partition, in static or failover mode.
type Replication struct {
	Enabled       bool
	ReplicaId     int
	Role          string
	ReplicateHost string
	ReplicatePort int
	ClientAddress string
	Token         string
	// AckTimeout is in seconds: how long acks=all waits for the ISR.
	AckTimeout float64
	Peers      []Peer
	Failover   Failover
	// LagMax is how many records behind the leader's log end a follower may
	// be and still count towards the static-mode high watermark.
	LagMax int64
	// IsrLagSeconds is how long a follower may stay behind the log end
	// before it is proposed out of the ISR.
	IsrLagSeconds float64
	// TLS serves the replication port over HTTPS and makes this replica
	// dial its peers over HTTPS; nil is plain HTTP. Every replica of a
	// group must have it, or none (see TLS for how the keys are used).
	// The Token still applies.
	TLS *TLS
}

// Peer is another member of the replication group.
type Peer struct {
	Id            int
	Address       string
	ClientAddress string
}

// Failover switches automatic, Raft-run failover on.
type Failover struct {
	Enabled bool
}

// Cluster is cluster mode: this broker's replication group is one of
// several that split the partitions between them, placed by a metadata
// log of its own (docs/CLUSTER.md).
type Cluster struct {
	Enabled bool
	// Experimental must be true: cluster mode is not finished (the
	// metadata log's voters cannot change).
	Experimental bool
	// ClusterId names the cluster; every broker of it has the same.
	ClusterId string
	// BrokerId is unique in the cluster and equal to Replication.ReplicaId.
	BrokerId int
	// GroupId names this broker's replication group; every broker of the
	// group has the same.
	GroupId string
	// MetadataVoters are the 3 or 5 brokers that hold the metadata log,
	// by id and replication address (host:port); the same list on every
	// broker of the cluster.
	MetadataVoters []MetadataVoter
	// ReplicationAddress is the host:port at which brokers of the other
	// groups reach this broker's replication port (transaction markers
	// and offset commits of transactions between groups), as Kafka's
	// advertised listeners; empty: its MetadataVoters address if it is a
	// voter, else Replication.ReplicateHost:ReplicatePort.
	ReplicationAddress string
	// CoordinatorPartitions is how many partitions __consumer_offsets
	// and __transaction_state get when the cluster creates them, spread
	// over the groups (Kafka's offsets.topic.num.partitions and
	// transaction.state.log.num.partitions); 0 means
	// DefaultCoordinatorPartitions. Fixed once the topics exist: a
	// group's or transactional id's partition depends on it.
	CoordinatorPartitions int
	// MoveBytesPerSecond caps how fast a group copies each partition
	// moving into it (0: as fast as it can).
	MoveBytesPerSecond int64
	// AutoBalance moves user topics' partitions between groups by
	// itself, one at a time, as `moonmq cluster balance` would, and
	// spreads the groups' leadership over the machines.
	AutoBalance bool
	// Machine names the machine (host, VM, pod node) this broker runs
	// on, for spreading group leadership: brokers of different groups
	// on one machine share it. Empty: the host of the advertised client
	// address.
	Machine string
}

// DefaultCoordinatorPartitions is Cluster.CoordinatorPartitions' default,
// Kafka's.
const DefaultCoordinatorPartitions = 50

// Partitions returns CoordinatorPartitions, or its default when unset.
func (c *Cluster) Partitions() int {
	if c.CoordinatorPartitions == 0 {
		return DefaultCoordinatorPartitions
	}
	return c.CoordinatorPartitions
}

// MetadataVoter is one voter of the cluster's metadata log.
type MetadataVoter struct {
	Id      int
	Address string
}

// Defaults used when a key is absent.
const (
	DefaultHost            = "127.0.0.1"
	DefaultPort            = 9092
	DefaultDataDir         = "./data"
	DefaultMetricsPort     = 9100
	DefaultMaxRequestBytes = 100 << 20
	DefaultMaxMessageBytes = 1048588
	// DefaultQueuedMaxRequestBytes is the most QueuedMaxRequestBytes
	// defaults to (less on a machine with under 2 GiB).
	DefaultQueuedMaxRequestBytes = 128 << 20
	// DefaultConnectionsMaxIdleMs is Kafka's connections.max.idle.ms.
	DefaultConnectionsMaxIdleMs = 600000
	// DefaultRequestReadTimeoutMs bounds the read of one request's body.
	DefaultRequestReadTimeoutMs = 30000
	DefaultSegmentBytes         = 1 << 30
	DefaultRetentionMs          = 7 * 24 * 3600 * 1000
	DefaultRetentionCheckMs     = 30000
	// DefaultFsyncStallMs is FsyncStallMs's default.
	DefaultFsyncStallMs = 2000
	// DefaultOffsetsRetentionMinutes is Kafka's offsets.retention.minutes.
	DefaultOffsetsRetentionMinutes = 7 * 24 * 60
	// DefaultOffsetsRetentionCheckMs is Kafka's
	// offsets.retention.check.interval.ms.
	DefaultOffsetsRetentionCheckMs = 600000
	// DefaultProducerIdExpirationMs is Kafka's producer.id.expiration.ms.
	DefaultProducerIdExpirationMs = 24 * 3600 * 1000
	// DefaultProducerIdExpirationCheckMs is Kafka's
	// producer.id.expiration.check.interval.ms.
	DefaultProducerIdExpirationCheckMs = 600000
	// DefaultTransactionalIdExpirationMs is Kafka's
	// transactional.id.expiration.ms.
	DefaultTransactionalIdExpirationMs = 7 * 24 * 3600 * 1000
	// DefaultTransactionalIdExpirationCheckMs is Kafka's
	// transaction.remove.expired.transaction.cleanup.interval.ms.
	DefaultTransactionalIdExpirationCheckMs = 3600000
	DefaultAckTimeoutSeconds                = 5
	DefaultIsrLagSeconds                    = 10
)

// DefaultMaxOpenSegmentFiles is what MaxOpenSegmentFiles 0 means for a
// process whose open-file limit is nofile: a quarter of it, leaving the rest
// to the active segments (one per partition), connections and state files,
// and at least 64.
func DefaultMaxOpenSegmentFiles(nofile uint64) int {
	return int(max(min(nofile/4, math.MaxInt32), 64))
}

// Default returns the configuration `moonmq serve` runs with when given no
// file.
func Default() Server {
	s := Server{}
	s.applyDefaults(map[string]bool{})
	return s
}

// Load reads and validates a configuration file.
func Load(path string) (Server, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Server{}, fmt.Errorf("read config: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return Server{}, fmt.Errorf("config %s: %w", path, err)
	}
	return s, nil
}

// Parse decodes and validates configuration JSON. Unknown keys and wrong
// types are errors that name the key.
func Parse(b []byte) (Server, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return Server{}, explainJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Server{}, errors.New("trailing data after the top-level JSON object")
	}
	// Which numeric keys were given explicitly matters for defaults: 0 is a
	// meaningful MetricsPort ("off"), absent is not.
	var raw struct{ Server map[string]json.RawMessage }
	_ = json.Unmarshal(b, &raw)
	if raw.Server == nil {
		return Server{}, errors.New(`missing "Server" object`)
	}
	given := make(map[string]bool, len(raw.Server))
	for k := range raw.Server {
		given[k] = true
	}
	s := f.Server
	s.applyDefaults(given)
	if err := s.Validate(); err != nil {
		return Server{}, err
	}
	return s, nil
}

func explainJSON(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := strings.TrimPrefix(te.Field, "Server.")
		return fmt.Errorf("key %q: expected %s, got JSON %s", field, te.Type, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return fmt.Errorf("unknown key %s (keys are case-sensitive; see docs/CONFIG.md)", strings.TrimPrefix(msg, "json: unknown field "))
	}
	return err
}

func (s *Server) applyDefaults(given map[string]bool) {
	if s.Host == "" {
		s.Host = DefaultHost
	}
	if !given["Port"] {
		s.Port = DefaultPort
	}
	if s.DataDir == "" {
		s.DataDir = DefaultDataDir
	}
	if !given["MetricsPort"] {
		s.MetricsPort = DefaultMetricsPort
	}
	if s.MetricsHost == "" {
		s.MetricsHost = s.Host
	}
	if s.Acks == "" {
		s.Acks = "leader"
	}
	if s.AutoCreateTopics == nil {
		t := true
		s.AutoCreateTopics = &t
	}
	if s.DefaultPartitions == 0 {
		s.DefaultPartitions = 1
	}
	if s.MaxRequestBytes == 0 {
		s.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if s.MaxMessageBytes == 0 {
		s.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if s.QueuedMaxRequestBytes == 0 {
		// A few hundred milliseconds of what a disk appends: more queued
		// requests add only latency and resident memory (64 producers
		// with megabytes in flight each held 300 MB at 1 GiB, at no gain
		// in throughput; docs/BENCHMARKS.md).
		s.QueuedMaxRequestBytes = max(min(memoryLimit()/16, DefaultQueuedMaxRequestBytes), int64(s.MaxRequestBytes))
	}
	if s.ConnectionsMaxIdleMs == 0 {
		s.ConnectionsMaxIdleMs = DefaultConnectionsMaxIdleMs
	}
	if s.RequestReadTimeoutMs == 0 {
		s.RequestReadTimeoutMs = DefaultRequestReadTimeoutMs
	}
	if s.SegmentBytes == 0 {
		s.SegmentBytes = DefaultSegmentBytes
	}
	if !given["RetentionMs"] {
		s.RetentionMs = DefaultRetentionMs
	}
	if !given["RetentionBytes"] {
		s.RetentionBytes = -1
	}
	if s.FsyncStallMs == 0 {
		s.FsyncStallMs = DefaultFsyncStallMs
	}
	if s.RetentionCheckMs == 0 {
		s.RetentionCheckMs = DefaultRetentionCheckMs
	}
	if s.OffsetsRetentionMinutes == 0 {
		s.OffsetsRetentionMinutes = DefaultOffsetsRetentionMinutes
	}
	if s.OffsetsRetentionCheckMs == 0 {
		s.OffsetsRetentionCheckMs = DefaultOffsetsRetentionCheckMs
	}
	if s.ProducerIdExpirationMs == 0 {
		s.ProducerIdExpirationMs = DefaultProducerIdExpirationMs
	}
	if s.ProducerIdExpirationCheckMs == 0 {
		s.ProducerIdExpirationCheckMs = DefaultProducerIdExpirationCheckMs
	}
	if s.TransactionalIdExpirationMs == 0 {
		s.TransactionalIdExpirationMs = DefaultTransactionalIdExpirationMs
	}
	if s.TransactionalIdExpirationCheckMs == 0 {
		s.TransactionalIdExpirationCheckMs = DefaultTransactionalIdExpirationCheckMs
	}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
	if s.AllowEveryoneIfNoAclFound == nil {
		t := true
		s.AllowEveryoneIfNoAclFound = &t
	}
	if r := s.Replication; r != nil {
		if r.AckTimeout == 0 {
			r.AckTimeout = DefaultAckTimeoutSeconds
		}
		if r.IsrLagSeconds == 0 {
			r.IsrLagSeconds = DefaultIsrLagSeconds
		}
		if r.ReplicateHost == "" {
			r.ReplicateHost = s.Host
		}
	}
}

// Validate checks values that decode but make no sense. Every error names
// its key.
func (s *Server) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("key %q: %s", key, fmt.Sprintf(format, args...)))
	}
	if net.ParseIP(s.Host) == nil && !validHostname(s.Host) {
		bad("Host", "%q is not an IP address or host name", s.Host)
	}
	if s.Port < 0 || s.Port > 65535 {
		bad("Port", "%d is not a TCP port (0-65535; 0 picks a free port)", s.Port)
	}
	if s.MetricsPort < 0 || s.MetricsPort > 65535 {
		bad("MetricsPort", "%d is not a TCP port (0 disables metrics)", s.MetricsPort)
	}
	if s.MetricsPort != 0 && s.MetricsPort == s.Port {
		bad("MetricsPort", "must differ from Port (%d)", s.Port)
	}
	if s.AdvertisedAddress != "" {
		if _, _, err := net.SplitHostPort(s.AdvertisedAddress); err != nil {
			bad("AdvertisedAddress", "%q is not host:port", s.AdvertisedAddress)
		}
	} else if ip := net.ParseIP(s.Host); ip != nil && ip.IsUnspecified() && (s.Replication == nil || s.Replication.ClientAddress == "") {
		bad("AdvertisedAddress", "must be set when Host is %s: clients cannot dial a wildcard address", s.Host)
	}
	if _, err := ParseAcks(s.Acks); err != nil {
		bad("Acks", "%v", err)
	}
	if s.DefaultPartitions < 1 || s.DefaultPartitions > 100000 {
		bad("DefaultPartitions", "%d is out of range 1-100000", s.DefaultPartitions)
	}
	if s.MaxRequestBytes < 1024 || s.MaxRequestBytes > 1<<30 {
		bad("MaxRequestBytes", "%d is out of range 1024-%d", s.MaxRequestBytes, 1<<30)
	}
	if s.QueuedMaxRequestBytes < int64(s.MaxRequestBytes) {
		bad("QueuedMaxRequestBytes", "%d is below MaxRequestBytes (%d): the largest request must fit", s.QueuedMaxRequestBytes, s.MaxRequestBytes)
	}
	if s.ConnectionsMaxIdleMs < -1 {
		bad("ConnectionsMaxIdleMs", "%d must be positive, or -1 to never close idle connections", s.ConnectionsMaxIdleMs)
	}
	if s.RequestReadTimeoutMs < 1 {
		bad("RequestReadTimeoutMs", "%d must be positive (milliseconds)", s.RequestReadTimeoutMs)
	}
	if s.MaxMessageBytes < 64 || s.MaxMessageBytes > s.MaxRequestBytes {
		bad("MaxMessageBytes", "%d is out of range 64-MaxRequestBytes (%d)", s.MaxMessageBytes, s.MaxRequestBytes)
	}
	if s.SegmentBytes < 1024 || s.SegmentBytes > 1<<31-1 {
		bad("SegmentBytes", "%d is out of range 1024-%d (index positions are 32-bit)", s.SegmentBytes, int64(1<<31-1))
	}
	if s.RetentionMs < -1 || s.RetentionMs == 0 {
		bad("RetentionMs", "%d must be positive, or -1 for unlimited", s.RetentionMs)
	}
	if s.RetentionBytes < -1 || s.RetentionBytes == 0 {
		bad("RetentionBytes", "%d must be positive, or -1 for unlimited", s.RetentionBytes)
	}
	if s.RetentionCheckMs < 10 {
		bad("RetentionCheckMs", "%d must be at least 10", s.RetentionCheckMs)
	}
	if s.MinFreeDiskBytes < -1 {
		bad("MinFreeDiskBytes", "%d must be positive, 0 for 5%% of the volume (at most 1 GiB), or -1 for no reserve", s.MinFreeDiskBytes)
	}
	if s.FsyncStallMs < -1 || (s.FsyncStallMs >= 0 && s.FsyncStallMs < 10) {
		bad("FsyncStallMs", "%d must be at least 10, or -1 to never count the disk as stalled", s.FsyncStallMs)
	}
	if s.MaxOpenSegmentFiles < 0 {
		bad("MaxOpenSegmentFiles", "%d must be positive, or 0 for a quarter of the open-file limit", s.MaxOpenSegmentFiles)
	}
	if s.OffsetsRetentionMinutes < -1 {
		bad("OffsetsRetentionMinutes", "%d must be positive, or -1 to keep committed offsets forever", s.OffsetsRetentionMinutes)
	}
	if s.OffsetsRetentionCheckMs < 10 {
		bad("OffsetsRetentionCheckMs", "%d must be at least 10", s.OffsetsRetentionCheckMs)
	}
	if s.ProducerIdExpirationMs < 1 {
		bad("ProducerIdExpirationMs", "%d must be positive", s.ProducerIdExpirationMs)
	}
	if s.ProducerIdExpirationCheckMs < 10 {
		bad("ProducerIdExpirationCheckMs", "%d must be at least 10", s.ProducerIdExpirationCheckMs)
	}
	if s.TransactionalIdExpirationMs < 1 {
		bad("TransactionalIdExpirationMs", "%d must be positive", s.TransactionalIdExpirationMs)
	}
	if s.TransactionalIdExpirationCheckMs < 10 {
		bad("TransactionalIdExpirationCheckMs", "%d must be at least 10", s.TransactionalIdExpirationCheckMs)
	}
	if _, err := ParseLevel(s.LogLevel); err != nil {
		bad("LogLevel", "%v", err)
	}
	s.validateSecurity(bad)
	if c := s.Cluster; c != nil && c.Enabled {
		errs = append(errs, c.validate(s)...)
	}
	if r := s.Replication; r != nil {
		errs = append(errs, r.validate(s)...)
	}
	return errors.Join(errs...)
}

func (r *Replication) validate(s *Server) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("key %q: %s", "Replication."+key, fmt.Sprintf(format, args...)))
	}
	if !r.Enabled {
		return nil
	}
	if r.ReplicaId <= 0 {
		bad("ReplicaId", "%d must be a positive integer", r.ReplicaId)
	}
	switch r.Role {
	case "leader", "follower", "both":
	case "":
		if !r.Failover.Enabled {
			bad("Role", "must be leader or follower in static mode")
		}
	default:
		bad("Role", "%q must be leader, follower or both", r.Role)
	}
	if r.ReplicatePort <= 0 || r.ReplicatePort > 65535 {
		bad("ReplicatePort", "%d is not a TCP port", r.ReplicatePort)
	} else if r.ReplicatePort == s.Port || r.ReplicatePort == s.MetricsPort {
		bad("ReplicatePort", "%d is already used by Port or MetricsPort", r.ReplicatePort)
	}
	if r.ClientAddress == "" {
		bad("ClientAddress", "must be set: it is the host:port clients are sent to when this replica leads")
	} else if _, _, err := net.SplitHostPort(r.ClientAddress); err != nil {
		bad("ClientAddress", "%q is not host:port", r.ClientAddress)
	}
	if r.AckTimeout < 0 {
		bad("AckTimeout", "%v must not be negative", r.AckTimeout)
	}
	if r.LagMax < 0 {
		bad("LagMax", "%d must not be negative", r.LagMax)
	}
	if r.IsrLagSeconds < 0 {
		bad("IsrLagSeconds", "%v must not be negative", r.IsrLagSeconds)
	}
	if err := r.CheckListenerAuth(); err != nil {
		errs = append(errs, err)
	}
	if t := r.TLS; t != nil {
		t.validate("TLS", "the replication port", bad)
		// The client side must verify the peers' certificates: without
		// a CA it would either trust the system roots (any public
		// certificate for the peer's name) or nothing.
		if t.ClientCAFile == "" && !t.RequireClientCert {
			bad("TLS.ClientCAFile", "must be set: on the replication port it is the group's CA, which verifies the peers' certificates")
		}
	}
	ids := map[int]bool{r.ReplicaId: true}
	addrs := map[string]bool{r.ClientAddress: true}
	for i, p := range r.Peers {
		key := fmt.Sprintf("Peers[%d]", i)
		if p.Id <= 0 {
			bad(key+".Id", "%d must be a positive integer", p.Id)
		} else if ids[p.Id] {
			bad(key+".Id", "%d is used twice (ReplicaId and peer ids must be unique)", p.Id)
		}
		ids[p.Id] = true
		if _, _, err := net.SplitHostPort(p.Address); err != nil {
			bad(key+".Address", "%q is not host:port", p.Address)
		} else if addrs[p.Address] {
			bad(key+".Address", "%q is used twice", p.Address)
		}
		addrs[p.Address] = true
		if _, _, err := net.SplitHostPort(p.ClientAddress); err != nil {
			bad(key+".ClientAddress", "%q is not host:port", p.ClientAddress)
		} else if addrs[p.ClientAddress] {
			bad(key+".ClientAddress", "%q is used twice", p.ClientAddress)
		}
		addrs[p.ClientAddress] = true
	}
	if r.Failover.Enabled {
		switch n := len(r.Peers) + 1; n {
		case 3, 5:
		case 2:
			slog.Warn("replication group of 2: elections stop when either replica dies; use 3 or 5 replicas", "key", "Replication.Peers")
		default:
			bad("Peers", "failover needs a group of 3 or 5 replicas (this one and its peers); got %d", n)
		}
	}
	return errs
}

// CheckListenerAuth refuses a replication listener that anyone beyond
// this machine could use: one bound to an address other than loopback
// with neither a Token nor mutual TLS. Such a port serves every
// partition's records, the manifest and the Raft group to whoever reaches
// it, and takes forwarded requests. It is part of Validate, and the broker
// checks it again when replication starts, for configurations built
// without Parse. The error names the key to set.
func (r *Replication) CheckListenerAuth() error {
	if r.Token != "" || r.TLS != nil && r.TLS.RequireClientCert || LoopbackHost(r.ReplicateHost) {
		return nil
	}
	where := fmt.Sprintf("%q", r.ReplicateHost)
	if ip := net.ParseIP(r.ReplicateHost); r.ReplicateHost == "" || ip != nil && ip.IsUnspecified() {
		where += " (every interface)"
	}
	return fmt.Errorf("key %q: must be set when the replication port listens on %s, which is not loopback (ReplicateHost, default Host): without it anyone who reaches ReplicatePort %d can read every partition and take part in the group. Give every replica the same Replication.Token, or require client certificates (Replication.TLS with RequireClientCert), or bind ReplicateHost to 127.0.0.1",
		"Replication.Token", where, r.ReplicatePort)
}

// LoopbackHost reports whether a listener bound to host is reachable only
// from this machine: host is "localhost" or an address in 127.0.0.0/8 or
// ::1. An empty host and the wildcards bind every interface.
func LoopbackHost(host string) bool {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// AcksFloor is the broker-side minimum acknowledgement level.
type AcksFloor int

// Acknowledgement floors, ordered from weakest to strongest.
const (
	AcksNone AcksFloor = iota
	AcksLeader
	AcksAll
)

// ParseAcks turns the Acks key into a floor. Kafka's numeric spellings are
// accepted too.
func ParseAcks(s string) (AcksFloor, error) {
	switch strings.ToLower(s) {
	case "none", "0":
		return AcksNone, nil
	case "leader", "1":
		return AcksLeader, nil
	case "all", "-1":
		return AcksAll, nil
	}
	return 0, fmt.Errorf("%q must be all, leader or none", s)
}

// ParseLevel turns LogLevel into a slog level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q must be debug, info, warn or error", s)
	}
	return l, nil
}

// ClientListenAddr is the host:port the client listener binds.
func (s *Server) ClientListenAddr() string {
	return net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// MetricsListenAddr is the host:port the metrics listener binds.
func (s *Server) MetricsListenAddr() string {
	return net.JoinHostPort(s.MetricsHost, strconv.Itoa(s.MetricsPort))
}

func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// validate checks an enabled Cluster block against the rest of s.
func (c *Cluster) validate(s *Server) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("key %q: %s", "Cluster."+key, fmt.Sprintf(format, args...)))
	}
	if !c.Experimental {
		bad("Experimental", "cluster mode is not finished (the metadata log's voters are fixed; docs/CLUSTER.md): set it to true to run it anyway, or use one replication group (Server.Replication)")
	}
	if c.MoveBytesPerSecond < 0 {
		bad("MoveBytesPerSecond", "%d must be 0 (no cap) or more", c.MoveBytesPerSecond)
	}
	if c.CoordinatorPartitions < 0 || c.CoordinatorPartitions > 1000 {
		bad("CoordinatorPartitions", "%d must be 1-1000 (0: %d, Kafka's default)", c.CoordinatorPartitions, DefaultCoordinatorPartitions)
	}
	r := s.Replication
	if r == nil || !r.Enabled || !r.Failover.Enabled {
		bad("Enabled", "each broker of a cluster is a member of a failover replication group: set Replication.Enabled and Replication.Failover.Enabled")
	} else if c.BrokerId != r.ReplicaId {
		bad("BrokerId", "%d must equal Replication.ReplicaId (%d): a broker has one id in its group and in the cluster", c.BrokerId, r.ReplicaId)
	}
	if c.BrokerId <= 0 {
		bad("BrokerId", "%d must be a positive integer, unique in the cluster", c.BrokerId)
	}
	if strings.TrimSpace(c.ClusterId) == "" {
		bad("ClusterId", "is empty: name the cluster, the same on every broker")
	}
	if !validGroupID(c.GroupId) {
		bad("GroupId", "%q must be 1-64 letters, digits, '.', '_' or '-', the same on every broker of the group", c.GroupId)
	}
	if n := len(c.MetadataVoters); n != 3 && n != 5 {
		bad("MetadataVoters", "%d voters: the metadata log needs 3 or 5", n)
	}
	seen := map[int]bool{}
	for i, v := range c.MetadataVoters {
		switch {
		case v.Id <= 0:
			bad(fmt.Sprintf("MetadataVoters[%d].Id", i), "%d must be a positive broker id", v.Id)
		case seen[v.Id]:
			bad(fmt.Sprintf("MetadataVoters[%d].Id", i), "%d is listed twice", v.Id)
		}
		seen[v.Id] = true
		if _, _, err := net.SplitHostPort(v.Address); err != nil {
			bad(fmt.Sprintf("MetadataVoters[%d].Address", i), "%q: %v (want the voter's replication host:port)", v.Address, err)
		}
	}
	if a := c.ReplicationAddress; a != "" {
		if h, _, err := net.SplitHostPort(a); err != nil || h == "" {
			bad("ReplicationAddress", "%q is not host:port (the address other groups' brokers reach this broker's replication port at; leave it out to use the voter address or ReplicateHost:ReplicatePort)", a)
		}
	}
	return errs
}

// validGroupID reports whether id can name a replication group.
func validGroupID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
