// Package freeport hands out loopback TCP ports for tests and benchmarks
// that start real servers. It owns only the record of the ports it handed
// out in this process; it binds nothing that outlives a call.
//
// A port is free when picked and bound later by another process, so two
// picks must never return the same port: the kernel happily hands a just
// closed ephemeral port out again (a benchmark once wrote two peers with the
// same replication address, a test cluster once gave one replica's client
// port to another's metrics listener).
package freeport

import (
	"fmt"
	"net"
	"sync"
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Pick returns a loopback port that was free a moment ago and that no
// earlier Pick in this process returned.
func Pick() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for tries := 0; ; tries++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pick a free loopback port: %w", err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			return p, nil
		}
		if tries > 1000 {
			return 0, fmt.Errorf("pick a free loopback port: the kernel returned only ports already handed out (%d of them)", len(handedOut.ports))
		}
	}
}

// PickN returns n distinct ports, each as Pick returns them.
func PickN(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := Pick()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// Fataler is the part of testing.TB that Must uses.
type Fataler interface {
	Helper()
	Fatal(args ...any)
}

// Must is Pick for a test: it fails the test when no port can be had.
func Must(t Fataler) int {
	t.Helper()
	p, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
