package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOutOfDescriptorsKeepsServing: a broker whose open-file limit is
// spent by idle connections keeps serving the client it already has, and
// logs the failing accept once per interval with what to raise, not once
// per retry.
func TestOutOfDescriptorsKeepsServing(t *testing.T) {
	port, mport := freePort(t), freePort(t)
	cfg := writeConfig(t, t.TempDir(), port, mport, "")
	// A small limit, through the shell: Go raises the soft limit to the
	// hard one at start, so both are lowered.
	cmd := exec.Command("sh", "-c", fmt.Sprintf("ulimit -n 96 && exec %s serve --config %s", binary, cfg))
	p := startCmd(t, cmd, &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("127.0.0.1:%d", mport)})

	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("fds"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 150; i++ {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			break
		}
		idle = append(idle, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log(), "accept failed; new connections wait") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure logged after %d connections:\n%s", len(idle), p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 20; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("during")}).FirstErr(); err != nil {
			t.Fatalf("produce on the existing connection while out of descriptors: %v", err)
		}
	}
	time.Sleep(time.Second)
	if n := strings.Count(p.log(), "accept failed"); n > 2 {
		t.Fatalf("accept failure logged %d times in about a second; want once per interval", n)
	}
	if !strings.Contains(p.log(), "raise the open-file limit") {
		t.Fatalf("the log line does not say what to raise:\n%s", p.log())
	}
}
