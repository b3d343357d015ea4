// Command wordcount counts the words of the lines on topic "words" in the
// store "counts" and writes every new count to "word-counts" (key: the
// word, value: its count as decimal text), exactly once by default.
//
//	go run ./examples/wordcount --config wordcount.yaml
//	STOATFLOW__APPLICATION_ID=wordcount STOATFLOW__BOOTSTRAP_SERVERS=127.0.0.1:9092 go run ./examples/wordcount
//	curl localhost:8080/state/counts/hello
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow"
)

func main() {
	config := flag.String("config", "", "YAML file with a stoatflow: block (environment variables STOATFLOW__* override it)")
	partitions := flag.Int("partitions", 3, "partitions of the topics words and word-counts when this creates them")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(*config, *partitions, log); err != nil {
		log.Error("wordcount stopped", "err", err)
		if errors.Is(err, stoatflow.ErrFenced) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// Topology is the word count: lines, split into lower-cased words,
// re-keyed by word, counted.
func Topology() *stoatflow.Topology {
	t := stoatflow.NewTopology()
	lines := stoatflow.Source(t, stoatflow.String, stoatflow.String, []string{"words"})
	words := stoatflow.FlatMapValues(lines, func(line string) []string {
		return strings.Fields(strings.ToLower(line))
	})
	counts := stoatflow.GroupBy(words, func(_, w string) string { return w }, stoatflow.String, stoatflow.String).Count("counts")
	counts.ToStream().To("word-counts", stoatflow.String, stoatflow.Decimal)
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
	err = stoatflow.CreateTopics(cctx, cfg, partitions, "words", "word-counts")
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
