// Command stoatchaos runs a long randomized fault run of StoatFlow
// against real processes: a MoonMQ broker (one node, or a three-replica
// Raft group), pods of the word-count example (examples/wordcount) in
// ha.mode active-standby (or one instance), and a feeder producing lines
// to "words" throughout. A seeded schedule kills, freezes, switches and
// restarts pods, kills the broker group's leader and crashes the
// application at the steps of its commit protocol; after every fault it
// waits for one active and records the takeover time, and every few
// faults (and at the end) it checks exactly-once from the topics
// (internal/flowcheck). Any anomaly stops the run.
//
//	go run ./cmd/stoatchaos --seed 1 --duration 5m --report chaos.html
//	go run ./cmd/stoatchaos --seed 7 --duration 30m --replicas 3 --faults kill-active,kill-broker-leader,crashpoint
//	go run ./cmd/stoatchaos --pods 1 --duration 10m
//
// It builds the broker (../cmd/moonmq, or $MOONMQ_BINARY) and the example
// from the working tree, so it runs from a checkout with a Go toolchain.
// Exit status: 0 no anomaly, 1 anomalies, 2 a usage error or a failure of
// the run itself (a broker that does not start).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stoatchaos:", err)
		os.Exit(2)
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "stoatchaos: interrupted: ending the fault phase after this fault, then the final check (again to abort)")
		close(stop)
		<-sig
		fmt.Fprintln(os.Stderr, "stoatchaos: aborted")
		os.Exit(2) // the kernel kills the processes started (Pdeathsig)
	}()
	cfg.Stop = stop
	res := Run(cfg)
	testenv.RemoveBinaries()
	os.Exit(res.ExitCode())
}

func parseFlags(args []string, errOut io.Writer) (Config, error) {
	fs := flag.NewFlagSet("stoatchaos", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var cfg Config
	seed := fs.Uint64("seed", 0, "seed of the fault schedule and the input (0: from the clock, printed)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "length of the fault phase")
	fs.IntVar(&cfg.Pods, "pods", 3, "word-count pods: 2 or more in ha.mode active-standby, 1 for the single-instance tier")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "MoonMQ brokers: 1, or 3 for a failover-mode (Raft) replication group")
	faults := fs.String("faults", "all", "faults to inject, comma-separated, or -kind,... to leave some out; kinds: "+kindList(AllKinds))
	fs.IntVar(&cfg.CheckEvery, "check-every", 10, "faults between exactly-once checks")
	fs.IntVar(&cfg.Rate, "rate", 200, "lines per second the feeder produces")
	fs.StringVar(&cfg.Report, "report", "", "HTML report (default stoatchaos-<seed>.html; the JSON summary goes beside it)")
	fs.StringVar(&cfg.Dir, "dir", "", "run directory for the processes' data and logs (default: a new temporary directory)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run directory after a run without anomalies (it is always kept after one with)")
	fs.Usage = func() {
		fmt.Fprintf(errOut, "usage: stoatchaos [flags]\n\nA randomized fault run of the word-count example against real MoonMQ brokers; exit 0 (no anomaly), 1 (anomalies), 2 (usage, harness).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", strings.Join(fs.Args(), " "))
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	ks, err := parseKinds(*faults, cfg.Pods, cfg.Replicas)
	if err != nil {
		return cfg, err
	}
	cfg.Faults = ks
	if cfg.Report == "" {
		cfg.Report = fmt.Sprintf("stoatchaos-%d.html", cfg.Seed)
	}
	if _, err := cfg.withDefaults(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
