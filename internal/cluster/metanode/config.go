package metanode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/moonmq/moonmq/internal/vfs"
)

// Defaults for Config.
const (
	DefaultTickInterval    = 50 * time.Millisecond
	DefaultElectionTicks   = 10
	DefaultHeartbeatTicks  = 1
	DefaultCompactEvery    = 256
	DefaultLeaseInterval   = 2 * time.Second
	DefaultLeaseDuration   = 10 * time.Second
	DefaultShutdownTimeout = 2 * time.Second
	DefaultPullWait        = 2 * time.Second
	DefaultSaveInterval    = time.Second
)

// Config configures a Node.
type Config struct {
	// ID is this broker's Cluster.BrokerId (>= 0).
	ID int32
	// GroupID is this broker's replication group (Cluster.GroupId).
	GroupID string
	// Voters maps each metadata voter's broker id to its replication
	// address (host:port): 3 or 5 of them, static. The node is a voter
	// when ID is among them, else an observer.
	Voters map[int32]string
	// ClientAddress, ReplicationAddress and Machine are what this broker
	// registers (RegisterBrokerRecord).
	ClientAddress, ReplicationAddress, Machine string

	// DataDir holds the node's files (FileName and SnapshotFileName on a
	// voter, ObserverFileName on an observer).
	DataDir string
	// FS is the filesystem (vfs.Default if nil).
	FS vfs.FS
	// Token is the shared replication token: sent to peers, and required
	// from them by Handler (no check when empty).
	Token string
	// TLS, when set, is the client side of the replication port's TLS.
	TLS *tls.Config

	// Now is broker time (clock.Clock.Now; time.Now if nil). The leader's
	// reading stamps lease expiries and decides whether a lease runs.
	Now func() time.Time
	// LeaseInterval is how often the broker renews its registration,
	// LeaseDuration how long past the leader's now each renewal lasts.
	LeaseInterval, LeaseDuration time.Duration
	// ShutdownTimeout bounds Stop's proposal that shortens the lease.
	ShutdownTimeout time.Duration

	// TickInterval is one Raft tick; ElectionTicks and HeartbeatTicks are
	// Raft's timeouts in ticks.
	TickInterval                  time.Duration
	ElectionTicks, HeartbeatTicks int
	// CompactEvery is how many applied entries a voter keeps in its log
	// before folding them into the snapshot.
	CompactEvery int
	// PullWait is how long a voter holds an observer's pull that has
	// nothing new before it answers empty.
	PullWait time.Duration
	// SaveInterval bounds how often an observer writes its copy.
	SaveInterval time.Duration

	// Logger receives the node's lines (slog.Default if nil).
	Logger *slog.Logger
}

func (cfg *Config) setDefaults() error {
	if cfg.ID < 0 {
		return fmt.Errorf("metanode: broker id %d is negative", cfg.ID)
	}
	if n := len(cfg.Voters); n != 3 && n != 5 {
		return fmt.Errorf("metanode: %d metadata voters, want 3 or 5", n)
	}
	for id, addr := range cfg.Voters {
		if id < 0 || addr == "" {
			return fmt.Errorf("metanode: metadata voter %d at %q", id, addr)
		}
	}
	if cfg.GroupID == "" || cfg.ClientAddress == "" || cfg.ReplicationAddress == "" {
		return errors.New("metanode: GroupID, ClientAddress and ReplicationAddress are needed to register")
	}
	if cfg.DataDir == "" {
		return errors.New("metanode: no DataDir")
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	setDuration(&cfg.LeaseInterval, DefaultLeaseInterval)
	setDuration(&cfg.LeaseDuration, DefaultLeaseDuration)
	setDuration(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	setDuration(&cfg.TickInterval, DefaultTickInterval)
	setDuration(&cfg.PullWait, DefaultPullWait)
	setDuration(&cfg.SaveInterval, DefaultSaveInterval)
	if cfg.LeaseDuration <= cfg.LeaseInterval {
		return fmt.Errorf("metanode: LeaseDuration %v must exceed LeaseInterval %v, or every lease runs out before its renewal", cfg.LeaseDuration, cfg.LeaseInterval)
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = DefaultElectionTicks
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if cfg.ElectionTicks <= cfg.HeartbeatTicks {
		return fmt.Errorf("metanode: ElectionTicks %d must exceed HeartbeatTicks %d", cfg.ElectionTicks, cfg.HeartbeatTicks)
	}
	if cfg.CompactEvery <= 0 {
		cfg.CompactEvery = DefaultCompactEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("component", "metadata", "broker", cfg.ID)
	return nil
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}
