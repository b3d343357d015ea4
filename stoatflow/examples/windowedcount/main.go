// Command windowedcount counts the events per key on topic "events" in
// one-minute tumbling windows (event time: the record timestamp), accepts
// records up to ten seconds late, and writes each window's final count to
// "window-counts" once the window has closed (key: <key>@<window start,
// RFC 3339>, value: the count as decimal text), exactly once by default.
//
//	STOATFLOW__APPLICATION_ID=windowedcount STOATFLOW__BOOTSTRAP_SERVERS=127.0.0.1:9092 go run ./examples/windowedcount
//	curl localhost:8080/state/event-counts/alice
//
// A window closes when stream time, the highest event time the partition
// has seen, passes its end plus the grace: its result waits for a later
// event of the same partition.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow"
)

func main() {
	config := flag.String("config", "", "YAML file with a stoatflow: block (environment variables STOATFLOW__* override it)")
	partitions := flag.Int("partitions", 3, "partitions of the topics events and window-counts when this creates them")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(*config, *partitions, log); err != nil {
		log.Error("windowedcount stopped", "err", err)
		if errors.Is(err, stoatflow.ErrFenced) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// Window and Grace are the windows counted.
const (
	Window = time.Minute
	Grace  = 10 * time.Second
)

// Topology counts events per key and window, held back until the window
// closes.
func Topology() *stoatflow.Topology {
	t := stoatflow.NewTopology()
	events := stoatflow.Source(t, stoatflow.String, stoatflow.String, []string{"events"})
	counts := stoatflow.WindowedBy(events.GroupByKey(stoatflow.String, stoatflow.String), stoatflow.Tumbling(Window, Grace)).
		Count("event-counts")
	final := stoatflow.Suppress(counts, stoatflow.UntilWindowCloses)
	out := stoatflow.SelectKey(final.ToStream(), func(w stoatflow.Windowed[string], _ int64) string {
		return w.Key + "@" + w.Start.UTC().Format(time.RFC3339)
	})
	out.To("window-counts", stoatflow.String, stoatflow.Decimal)
	return t
}

func run(config string, partitions int, log *slog.Logger) error {
	cfg, err := stoatflow.LoadConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = stoatflow.CreateTopics(cctx, cfg, partitions, "events", "window-counts")
	cancel()
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	app, err := stoatflow.New(cfg, Topology(), stoatflow.WithLogger(log))
	if err != nil {
		return err
	}
	return app.Run(ctx)
}
