// Package app wires a configured broker to its listeners: the Kafka client
// port and the metrics port. It is what `moonmq serve` runs and what
// in-process tests start, so both exercise the same wiring.
//
// It owns no protocol or storage logic.
package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/broker"
	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/metrics"
	"github.com/moonmq/moonmq/internal/vfs"
)

// Instance is a running broker with its listeners.
type Instance struct {
	Broker  *broker.Broker
	server  *broker.Server
	metrics *metrics.Server
	log     *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// Start opens the data directory, recovers it, and starts listening.
func Start(cfg config.Server, log *slog.Logger, opts ...broker.Option) (*Instance, error) {
	opts = append([]broker.Option{broker.WithLogger(log)}, opts...)
	// The fault harness's power-loss mode (internal/chaos); a caller's own
	// WithFS, later in opts, still wins.
	if lossy, err := vfs.FromTestEnv(os.Getenv(vfs.LoseUnsyncedEnv)); err != nil {
		return nil, err
	} else if lossy != nil {
		log.Warn("TEST MODE: unsynced writes are kept in process memory and lost when the process dies; never use this in production",
			"env", vfs.LoseUnsyncedEnv, "value", os.Getenv(vfs.LoseUnsyncedEnv))
		opts = append([]broker.Option{broker.WithFS(lossy)}, opts...)
	}
	// The tests' and the fault harness's stepped wall clock; a caller's
	// own WithClock, later in opts, still wins.
	if clk, stepped, err := clock.FromTestEnv(os.Getenv(clock.OffsetFileEnv)); err != nil {
		return nil, err
	} else if stepped {
		log.Warn("TEST MODE: the wall clock is moved by the offset in a file; never use this in production",
			"env", clock.OffsetFileEnv, "file", os.Getenv(clock.OffsetFileEnv))
		opts = append([]broker.Option{broker.WithClock(clk)}, opts...)
	}
	// The tests' and the fault harness's injected disk faults.
	if faults, err := diskhealth.FaultsFromTestEnv(os.Getenv(diskhealth.FaultsFileEnv)); err != nil {
		return nil, err
	} else if faults != nil {
		log.Warn("TEST MODE: disk faults are injected from a file; never use this in production",
			"env", diskhealth.FaultsFileEnv, "file", os.Getenv(diskhealth.FaultsFileEnv))
		opts = append([]broker.Option{broker.WithDiskFaults(faults)}, opts...)
	}
	// Before the data directory is opened: a wrong file stops the start
	// naming its key.
	var macc metrics.Access
	var mtls *tls.Config
	if m := cfg.Metrics; m != nil {
		macc = metrics.Access{Pprof: m.Pprof, Token: m.Token, Username: m.Username, Password: m.Password, ProtectMetrics: m.ProtectMetrics}
		var err error
		if mtls, err = auth.LoadListenerTLS((*auth.TLSFiles)(m.TLS), "Metrics.TLS"); err != nil {
			return nil, err
		}
	}
	b, err := broker.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.ClientListenAddr())
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("listen for clients on %s: %w (is another broker running? change Server.Port)", cfg.ClientListenAddr(), err)
	}
	// The clean-shutdown marker of the previous run (a failover replica
	// has already read it): gone from now on, so a crash of this run is
	// never taken for a clean stop.
	if _, err := b.ConsumeCleanShutdown(); err != nil {
		_ = ln.Close()
		b.Close()
		return nil, fmt.Errorf("remove the clean-shutdown marker in %s: %w", cfg.DataDir, err)
	}
	in := &Instance{Broker: b, log: log}
	in.server = b.Serve(ln)
	if cfg.MetricsPort != 0 {
		mln, err := net.Listen("tcp", cfg.MetricsListenAddr())
		if err != nil {
			in.server.Close()
			b.Close()
			return nil, fmt.Errorf("listen for metrics on %s: %w (change Server.MetricsPort, or 0 to disable)", cfg.MetricsListenAddr(), err)
		}
		if mtls != nil {
			mln = tls.NewListener(mln, mtls)
		}
		in.metrics = metrics.Serve(mln, metrics.Source{
			Stats:    func() any { return b.Snapshot() },
			Registry: b.Registry(),
			Ready:    b.Readiness,
		}, macc, log)
	}
	host, port := b.Advertised()
	log.Info("moonmq serving",
		"listen", in.server.Addr().String(),
		"advertised", net.JoinHostPort(host, fmt.Sprint(port)),
		"data_dir", cfg.DataDir,
		"metrics", in.MetricsAddr(),
		"acks_floor", cfg.Acks)
	return in, nil
}

// Addr is the client listener's address.
func (in *Instance) Addr() string { return in.server.Addr().String() }

// MetricsAddr is the metrics listener's address, or "off".
func (in *Instance) MetricsAddr() string {
	if in.metrics == nil {
		return "off"
	}
	return in.metrics.Addr().String()
}

// Close stops listening, closes client connections, syncs and closes the
// logs. Calling it again does nothing.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		if in.metrics != nil {
			in.metrics.Close()
		}
		in.server.Close()
		in.closeErr = in.Broker.Close()
		if in.closeErr == nil {
			// Everything is synced: the next start may trust this
			// replica's data as it stands (KIP-966's clean shutdown).
			if err := in.Broker.MarkCleanShutdown(); err != nil {
				in.log.Warn("could not write the clean-shutdown marker; the next start counts as unclean", "err", err)
			}
		}
		in.log.Info("moonmq stopped")
	})
	return in.closeErr
}
