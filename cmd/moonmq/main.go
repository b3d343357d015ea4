// Command moonmq is the MoonMQ broker: `moonmq serve` runs it, `moonmq
// status`, `moonmq topic` and `moonmq group` ask a running one, `moonmq
// bench` measures any Kafka-protocol broker, and `moonmq chaos` puts a
// replication group of its own processes through faults. The work lives in internal/; this file
// only parses the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/bench"
	"github.com/moonmq/moonmq/internal/cli"
	"github.com/moonmq/moonmq/internal/config"
)

const usage = `usage: moonmq <command> [flags]

commands:
  serve [--config FILE]   run the broker (defaults: clients on 127.0.0.1:9092,
                          data in ./data, metrics on 127.0.0.1:9100)
  status [flags]          a running broker's replication status, or its stats
                          without replication (moonmq status -h)
  topic describe [TOPIC...]
                          topics, partitions, leader, replicas and ISR as
                          kafka-topics --describe prints them
  topic list              topic names (moonmq topic -h)
  group list|describe|delete|seek
                          consumer groups: committed offsets and lag as
                          kafka-consumer-groups prints them, deletion, and
                          resetting an idle group's offsets (moonmq group -h)
  cluster status          cluster mode: groups, their leaders and brokers, each
                          partition's owner group (moonmq cluster -h)
  bench [flags]           benchmark a Kafka-protocol broker (moonmq bench -h)
  chaos [flags]           fault-injection run: a replication group of this
                          binary's processes under seeded faults, every client
                          operation checked, an HTML report (moonmq chaos -h)
  version                 print the version
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "status":
		return cli.Status(ctx, args[1:], stdout, stderr)
	case "topic", "topics":
		return cli.Topic(ctx, args[1:], stdout, stderr)
	case "group", "groups":
		return cli.Group(ctx, args[1:], stdout, stderr)
	case "cluster":
		return cli.Cluster(ctx, args[1:], stdout, stderr)
	case "bench":
		if err := bench.Command(ctx, args[1:], stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "moonmq bench:", err)
			return 1
		}
		return 0
	case "chaos":
		return chaosCmd(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "moonmq", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "moonmq: unknown command %q\n%s", args[0], usage)
	return 2
}

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "JSON config file with a \"Server\" object (docs/CONFIG.md); built-in defaults without it")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			fmt.Fprintln(stderr, "moonmq:", err)
			return 2
		}
	}
	level, _ := config.ParseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(stderr, opts)
	if *logFormat == "json" {
		h = slog.NewJSONHandler(stderr, opts)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	in, err := app.Start(cfg, log)
	// The broker keeps salted credentials only; drop this copy's plain
	// passwords so they do not sit in memory for the life of the process.
	for i := range cfg.Users {
		cfg.Users[i].Password = ""
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	<-ctx.Done()
	log.Info("shutting down")
	if err := in.Close(); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	return 0
}
