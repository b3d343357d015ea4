package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// serveNodeArg as the first argument makes natsbench run one cluster node
// instead of a benchmark. It is how startCluster launches its children; it is
// not meant to be typed by hand.
const serveNodeArg = "--serve-node"

// readyPrefix starts the line a node prints on stdout once it accepts
// clients; the rest of the line is its client URL.
const readyPrefix = "natsbench-node-ready "

// serveNode runs one clustered JetStream server until its stdin reaches EOF
// (the parent closed it or died) or it gets SIGTERM/SIGINT. Watching stdin
// means a killed parent never leaves orphaned servers behind.
func serveNode(args []string) error {
	fs := flag.NewFlagSet("natsbench node", flag.ContinueOnError)
	name := fs.String("name", "", "server name (unique in the cluster)")
	port := fs.Int("port", 0, "client port")
	clusterPort := fs.Int("cluster-port", 0, "route port")
	routes := fs.String("routes", "", "comma-separated route URLs of the other nodes")
	storeDir := fs.String("store-dir", "", "JetStream store directory")
	syncAlways := fs.Bool("sync-always", false, "fsync every message")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       "127.0.0.1",
		Port:       *port,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   *storeDir,
		SyncAlways: *syncAlways,
		Cluster: server.ClusterOpts{
			Name: "natsbench",
			Host: "127.0.0.1",
			Port: *clusterPort,
		},
		Routes: server.RoutesFromStr(*routes),
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return errors.New("nats-server did not become ready")
	}
	fmt.Printf("%s%s\n", readyPrefix, srv.ClientURL())

	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	select {
	case <-stdinClosed:
	case <-sigs:
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// cluster is a set of nats-server child processes.
type cluster struct {
	urls  []string
	procs []*exec.Cmd
	stdin []io.WriteCloser
}

// startCluster starts n clustered JetStream nodes as child processes, each
// with its own store under dir, and waits until every one accepts clients.
func startCluster(dir string, n int, syncAlways bool, stderr io.Writer) (*cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	clientPorts := make([]int, n)
	routePorts := make([]int, n)
	for i := range n {
		if clientPorts[i], err = freeport.Pick(); err != nil {
			return nil, err
		}
		if routePorts[i], err = freeport.Pick(); err != nil {
			return nil, err
		}
	}
	cl := &cluster{}
	ready := make(chan string, n)
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, (&url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", routePorts[j])}).String())
			}
		}
		args := []string{serveNodeArg,
			"--name", fmt.Sprintf("natsbench-%d", i+1),
			"--port", fmt.Sprint(clientPorts[i]),
			"--cluster-port", fmt.Sprint(routePorts[i]),
			"--routes", strings.Join(routes, ","),
			"--store-dir", filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
		}
		if syncAlways {
			args = append(args, "--sync-always")
		}
		cmd := exec.Command(self, args...)
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			cl.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			cl.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			cl.stop()
			return nil, fmt.Errorf("starting nats node %d: %w", i+1, err)
		}
		cl.procs = append(cl.procs, cmd)
		cl.stdin = append(cl.stdin, in)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if u, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
					ready <- u
				}
			}
		}()
	}
	timeout := time.After(60 * time.Second)
	for range n {
		select {
		case u := <-ready:
			cl.urls = append(cl.urls, u)
		case <-timeout:
			cl.stop()
			return nil, fmt.Errorf("only %d of %d nats nodes became ready within 60s", len(cl.urls), n)
		}
	}
	return cl, nil
}

// stop closes every node's stdin (which makes it shut down) and waits for
// it, killing a node that has not exited after 15 s.
func (cl *cluster) stop() {
	for _, in := range cl.stdin {
		in.Close()
	}
	for _, p := range cl.procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}

// waitJetStream waits until the JetStream API answers, i.e. the cluster's
// meta group has a leader.
func waitJetStream(ctx context.Context, js jetstream.JetStream, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream cluster not ready within %s: %w", within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
