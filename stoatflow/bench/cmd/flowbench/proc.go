package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

// proc is one program flowbench runs: a broker or an application under
// test. Its stderr goes to a log file; its stdout is read line by line for
// the PROGRESS / READY / RESTORE_* lines the benchmark apps print (and
// copied to the log too).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	exited  chan struct{}
	err     error

	mu       sync.Mutex
	progress []sample // (app clock ms, counter)
	readyAt  []int64  // app clock ms of each READY line
	lines    []string // RESTORE_* and ERROR lines
	out      strings.Builder
}

type sample struct {
	ms  int64
	n   int64 // the counting step
	src int64 // input records read
}

// all processes started, killed by killAll on the way out.
var (
	procsMu sync.Mutex
	procs   []*proc
)

func startProc(name, logPath, bin string, args []string, env []string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== flowbench: start %s at %s: %s %s ===\n", name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Its own process group (a ^C reaches only flowbench, which stops the
	// children itself), killed by the kernel if flowbench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, log: f, exited: make(chan struct{})}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.readStdout(stdout)
	}()
	go func() {
		<-read
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		fmt.Fprintf(f, "=== flowbench: %s exited: %v ===\n", name, err)
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) readStdout(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		p.mu.Lock()
		switch {
		case len(fields) >= 3 && fields[0] == "PROGRESS":
			ms, _ := strconv.ParseInt(fields[1], 10, 64)
			n, _ := strconv.ParseInt(fields[2], 10, 64)
			src := n
			if len(fields) >= 4 {
				src, _ = strconv.ParseInt(fields[3], 10, 64)
			}
			p.progress = append(p.progress, sample{ms, n, src})
		case len(fields) >= 2 && fields[0] == "READY":
			ms, _ := strconv.ParseInt(fields[1], 10, 64)
			p.readyAt = append(p.readyAt, ms)
			fmt.Fprintln(p.log, line)
		case len(fields) >= 1 && (strings.HasPrefix(fields[0], "RESTORE_") || fields[0] == "ERROR"):
			p.lines = append(p.lines, line)
			fmt.Fprintln(p.log, line)
		default:
			fmt.Fprintln(p.log, line)
		}
		p.mu.Unlock()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// lastProgress is the latest counter value and its app-clock time.
func (p *proc) lastProgress() sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.progress) == 0 {
		return sample{}
	}
	return p.progress[len(p.progress)-1]
}

// firstProgress is the first sample in which the app had read an input
// record.
func (p *proc) firstProgress() (sample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.progress {
		if s.src > 0 {
			return s, true
		}
	}
	return sample{}, false
}

// crossing is the app-clock time the counter first reached n (-1: not
// yet).
func (p *proc) crossing(n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.progress {
		if s.n >= n {
			return s.ms
		}
	}
	return -1
}

func (p *proc) ready() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.readyAt) == 0 {
		return 0, false
	}
	return p.readyAt[0], true
}

func (p *proc) specialLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Stop sends SIGTERM and waits up to within; then SIGKILL. It reports
// whether the process ended on its own.
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

func (p *proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func killAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

// logText is the process's log so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// tail is the last n lines of the log.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() int {
	p, err := benchutil.FreePorts(1)
	if err != nil {
		return 0
	}
	return p[0]
}
