// Command sleeper is the program testenv's own tests run through
// BuildBinary and StartProcess: it greets, then waits for SIGTERM and says
// goodbye, so that a test can tell a clean stop from a kill.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Println("up", os.Getenv("GREETING"))
	<-sig
	fmt.Fprintln(os.Stderr, "bye")
}
