//go:build unix

package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// logTail is how many lines of a log a failed test gets to see: enough for
// the last start and its errors, short enough to keep the failure readable.
const logTail = 60

// pollEvery is how often waits look again; processes here start in
// seconds, so finer polling would only burn the CPU the brokers need.
const pollEvery = 50 * time.Millisecond

// failed reports whether t's test failed, when t can tell.
func failed(t TB) bool {
	f, ok := t.(interface{ Failed() bool })
	return ok && f.Failed()
}

// poll calls cond until it holds or within has passed, and reports
// whether it held.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return tailString(string(b), n)
}

func tailString(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// handedOut holds every port this process's tests were given. A probe
// listener is closed the moment its port is picked, and the kernel may
// offer a just-closed port again, so without this record two brokers, or a
// broker and an instance's status listener, could be given the same port.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback port that was free a moment ago and that no
// earlier pick in this process returned.
func FreePort(t TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: probe for a free port: %v", err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			return p
		}
	}
}

func freePorts(t TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	return ports
}

// metadata sends one Metadata request to the broker at addr itself (not to
// whichever broker the client learns of) and fails unless the answer names
// at least one broker: a listener that accepts connections but cannot yet
// describe the cluster is not ready for a test's clients.
func metadata(addr string, within time.Duration, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DialTimeout(within)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	seeds := cl.SeedBrokers()
	if len(seeds) != 1 {
		return fmt.Errorf("client has %d seed brokers", len(seeds))
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	resp, err := seeds[0].Request(ctx, kmsg.NewPtrMetadataRequest())
	if err != nil {
		return err
	}
	if len(resp.(*kmsg.MetadataResponse).Brokers) == 0 {
		return errors.New("metadata names no broker")
	}
	return nil
}

// stoatflowModule is the module whose root moduleRoot looks for.
const stoatflowModule = "github.com/moonmq/moonmq/stoatflow"

// moduleRoot returns the root directory of the stoatflow module: the
// nearest directory above this source file (or, in a binary built with
// -trimpath, above the working directory) whose go.mod declares it.
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if goModModule(filepath.Join(dir, "go.mod")) == stoatflowModule {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("no directory above %v has the go.mod of %s", starts, stoatflowModule)
}

// goModModule returns the module path a go.mod file declares, "" if it
// cannot be read.
func goModModule(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`")
		}
	}
	return ""
}
