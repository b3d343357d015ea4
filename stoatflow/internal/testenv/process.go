//go:build unix

package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one program run by a test, its stdout and stderr together
// in a log file under the test's TempDir.
type Process struct {
	t       TB
	name    string
	cmd     *exec.Cmd
	logPath string
	// logFrom is where this run's output starts in logPath: a restarted
	// broker appends to the log of its earlier runs, and a wait for its
	// ready line must not be satisfied by theirs.
	logFrom int64
	exited  chan struct{}

	mu     sync.Mutex
	err    error // cmd.Wait's answer, set before exited closes
	paused bool
}

// StartProcess runs bin with args, its environment that of the test
// binary plus env (a later entry wins), and kills it when the test ends.
func StartProcess(t TB, bin string, args []string, env []string) *Process {
	t.Helper()
	// TempDir before Cleanup: cleanups run last-registered first, so the
	// process is dead before its directory is removed.
	dir := t.TempDir()
	name := filepath.Base(bin)
	p, err := spawn(name, bin, args, env, "", filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p.t = t
	t.Cleanup(func() {
		p.Kill()
		if failed(t) {
			t.Logf("testenv: last %d lines of %s's log (%s):\n%s", logTail, name, p.logPath, tail(p.logPath, logTail))
		}
	})
	return p
}

// spawn starts bin with its output appended to logPath. The caller owns
// the result: it sets t and arranges the cleanup.
func spawn(name, bin string, args, env []string, dir, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== testenv: start %s at %s: %s %s ===\n", name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	for _, e := range env {
		fmt.Fprintf(f, "=== testenv: environment %s ===\n", e)
	}
	from, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		f.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// A file, not a pipe: the child writes straight into it, so nothing is
	// lost if the test binary dies, and Wait returns as the child exits
	// instead of when some grandchild closes the pipe.
	cmd.Stdout, cmd.Stderr = f, f
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, logFrom: from, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== testenv: %s exited: %v ===\n", name, err)
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Wait waits up to within for the process to end; err is its exit status
// (nil for exit code 0) when it has.
func (p *Process) Wait(within time.Duration) (exited bool, err error) {
	// Checked alone first: with a zero within both cases below may be
	// ready, and select would pick either.
	if !p.Exited() {
		select {
		case <-p.exited:
		case <-time.After(within):
			return false, nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return true, p.err
}

// Kill ends the process with SIGKILL and waits for it: nothing is flushed
// and nothing shut down, as in a crash. A process that already ended is
// left alone.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop asks the process to end with SIGTERM and waits up to within; a
// process that overstays is killed. It reports whether the process ended
// on its own (true too if it had already ended).
func (p *Process) Stop(within time.Duration) bool {
	if p.Exited() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if paused {
		// A stopped process acts on SIGTERM only once continued.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(within):
		if p.Exited() {
			return true // it ended just as the time ran out
		}
		p.Kill()
		return false
	}
}

// Pause stops the process with SIGSTOP: its sockets stay open and nothing
// answers, as on a machine that hangs. It returns once the kernel has
// actually stopped it.
func (p *Process) Pause() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("testenv: SIGSTOP %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	// The signal is queued, not yet acted on: a test that pauses a
	// consumer and then produces must know the consumer no longer reads.
	pid := p.cmd.Process.Pid
	if !poll(10*time.Second, func() bool { return p.Exited() || stopped(pid) }) {
		p.t.Fatalf("testenv: %s not stopped 10s after SIGSTOP", p.name)
	}
}

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("testenv: SIGCONT %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// Log returns what the process has written to stdout and stderr so far.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < p.logFrom {
		return ""
	}
	return string(b[p.logFrom:])
}

// WaitLog waits up to within for substring to appear in the process's
// output and reports whether it did. It gives up early once the process
// has ended without writing it.
func (p *Process) WaitLog(within time.Duration, substring string) bool {
	deadline := time.Now().Add(within)
	for {
		// Exited is read before the log: output written before the exit
		// is then surely in the file that is read.
		done := p.Exited()
		if strings.Contains(p.Log(), substring) {
			return true
		}
		if done || time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// builds holds the binaries built in this test binary, one per package.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*build
}

type build struct {
	once sync.Once
	out  string // where the binary is written
	path string // out, once built
	err  error
}

// BuildBinary builds the main package pkg of the stoatflow module (an
// import path, or a path relative to the module root such as
// "./examples/wordcount") and returns the binary's path. Each package is
// built once per test binary; RemoveBinaries removes them.
func BuildBinary(t TB, pkg string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	path, err := buildOnce(root, pkg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return path
}

// buildOnce runs `go build pkg` in dir on the first call for dir and pkg,
// and returns that build's binary (or failure) on every call.
func buildOnce(dir, pkg string) (string, error) {
	key := dir + "\x00" + pkg
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	if builds.dir == "" {
		// Outside any test's TempDir: the binary outlives the test that
		// first asked for it, for the next one.
		d, err := os.MkdirTemp("", "stoatflow-testenv-")
		if err != nil {
			builds.mu.Unlock()
			return "", err
		}
		builds.dir = d
	}
	b := builds.bins[key]
	if b == nil {
		// Numbered, as two packages may share a last element.
		name := filepath.Base(pkg)
		if name == "." || name == string(filepath.Separator) {
			name = "main"
		}
		b = &build{out: filepath.Join(builds.dir, fmt.Sprintf("%s-%d", name, len(builds.bins)+1))}
		builds.bins[key] = b
	}
	builds.mu.Unlock()
	// Outside the lock, so that packages asked for by parallel tests build
	// at the same time.
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", b.out, pkg)
		cmd.Dir = dir
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s (in %s): %v\n%s", pkg, dir, err, msg)
			return
		}
		b.path = b.out
	})
	return b.path, b.err
}

// RemoveBinaries removes every binary BuildBinary and MoonMQ built. A
// package's TestMain calls it after m.Run; without it they stay in the
// system's temporary directory.
func RemoveBinaries() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.dir, builds.bins = "", nil
}
