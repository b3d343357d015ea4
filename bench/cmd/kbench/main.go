// Command kbench runs the same load generator as `moonmq bench`
// (github.com/moonmq/moonmq/internal/bench) without needing the moonmq
// binary. bench/run.sh uses the moonmq binary; kbench is for working on the
// load generator itself, e.g. against kfakepeer.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/moonmq/moonmq/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.Command(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "kbench: %v\n", err)
		os.Exit(1)
	}
}
