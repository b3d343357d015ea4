package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

// proc is one program habench runs: the broker, a word-count pod or a
// Kafka Streams instance. stdout and stderr go to a log file; when onLine
// is set, stdout is also handed to it line by line.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}

	mu  sync.Mutex
	err error
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

func startProc(name, logPath, bin string, args, env []string, onLine func(string)) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== habench: start %s at %s: %s %s ===\n", name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	for _, e := range env {
		fmt.Fprintf(f, "=== habench: environment %s ===\n", e)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	var stdout io.ReadCloser
	if onLine != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = f
	}
	// Its own process group (a ^C reaches only habench, which stops the
	// children itself), killed by the kernel if habench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	read := make(chan struct{})
	go func() {
		defer close(read)
		if stdout == nil {
			return
		}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			onLine(line)
		}
	}()
	go func() {
		<-read
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		fmt.Fprintf(f, "=== habench: %s exited at %s: %v ===\n", name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL and waits until the process is reaped.
func (p *proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop sends SIGTERM and waits up to within, then SIGKILL; it reports
// whether the process ended by itself.
func (p *proc) Stop(within time.Duration) bool {
	if p.Exited() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(within):
		p.Kill()
		return false
	}
}

func killAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// broker is the single-node moonmq every phase runs against.
type broker struct {
	p       *proc
	addr    string
	dataDir string
}

func startBroker(bin, work, logDir string) (*broker, error) {
	ports, err := benchutil.FreePorts(2)
	if err != nil {
		return nil, err
	}
	b := &broker{addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), dataDir: filepath.Join(work, "moonmq-data")}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(work, "moonmq.json")
	cfg, _ := json.MarshalIndent(map[string]any{"Server": map[string]any{
		"Host": "127.0.0.1", "Port": ports[0], "MetricsPort": ports[1], "DataDir": b.dataDir, "LogLevel": "info",
	}}, "", "  ")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	b.p, err = startProc("moonmq", filepath.Join(logDir, "moonmq.log"), bin, []string{"serve", "--config", cfgPath}, nil, nil)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b.p.Exited() {
			return nil, fmt.Errorf("moonmq exited while starting:\n%s", b.p.tail(30))
		}
		if strings.Contains(b.p.logText(), "moonmq serving") && metadataOK(b.addr) == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("moonmq not ready within 60s:\n%s", b.p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metadataOK(addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).BrokerMetadata(ctx)
	return err
}

// topicBytes is what the broker keeps on disk for the topics whose
// directory names start with prefix.
func (b *broker) topicBytes(prefix string) int64 {
	var n int64
	filepath.Walk(b.dataDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.Contains(p, string(filepath.Separator)+prefix) {
			n += fi.Size()
		}
		return nil
	})
	return n
}
