// Command kfakepeer runs franz-go's fake Kafka cluster (kfake) as a
// stand-alone, single-broker peer for the MoonMQ benchmarks. It listens on
// 127.0.0.1 at --port, prints "kfakepeer listening on ADDR" once ready and
// runs until SIGINT or SIGTERM.
//
// By default kfake keeps all data in memory. --data-dir makes it persist to
// disk (page cache only, like Kafka's default) and --sync-writes adds an
// fsync per produced batch.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "TCP port to listen on (127.0.0.1)")
	dataDir := flag.String("data-dir", "", "persist data in this directory (default: in memory)")
	syncWrites := flag.Bool("sync-writes", false, "fsync every produced batch (needs --data-dir)")
	flag.Parse()

	if *syncWrites && *dataDir == "" {
		fmt.Fprintln(os.Stderr, "kfakepeer: --sync-writes needs --data-dir")
		os.Exit(2)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port)}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakepeer: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kfakepeer listening on %s\n", c.ListenAddrs()[0])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	c.Close()
}
