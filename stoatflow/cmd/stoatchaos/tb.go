package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
)

// runTB is the testenv.TB of a standalone run. Fatalf logs, records the
// failure and unwinds the run's goroutine (a panic with a fatal that Run
// recovers); Run then writes the report, runs the cleanups and the
// command exits non-zero. TempDir makes directories under the run
// directory; Cleanup functions run, last registered first, when the run
// ends.
//
// It has no Failed method on purpose: testenv then prints no log tails at
// cleanup (a long run starts hundreds of processes); the report carries
// the tails that matter and the run directory keeps every log.
//
// Only the run's own goroutine may call Fatalf (testenv is only used from
// it).
type runTB struct {
	dir string
	out io.Writer

	mu       sync.Mutex
	cleanups []func()
	dirs     int
	hint     string // names the next TempDir
	last     string // the latest TempDir
}

// fatal is what Fatalf panics with.
type fatal struct{ msg string }

func newTB(dir string, out io.Writer) *runTB { return &runTB{dir: dir, out: out} }

func (t *runTB) Helper() {}

func (t *runTB) Logf(format string, args ...any) {
	fmt.Fprintf(t.out, "stoatchaos: "+format+"\n", args...)
}

func (t *runTB) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.Logf("FATAL: %s", msg)
	panic(fatal{msg})
}

func (t *runTB) Skipf(format string, args ...any) {
	t.Fatalf("cannot run: "+format, args...)
}

func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// name sets the name of the next TempDir.
func (t *runTB) name(s string) {
	t.mu.Lock()
	t.hint = s
	t.mu.Unlock()
}

func (t *runTB) TempDir() string {
	t.mu.Lock()
	t.dirs++
	name := t.hint
	t.hint = ""
	if name == "" {
		name = fmt.Sprintf("tmp-%03d", t.dirs)
	}
	dir := filepath.Join(t.dir, unsafeName.ReplaceAllString(name, "_"))
	if _, err := os.Stat(dir); err == nil {
		dir = fmt.Sprintf("%s-%03d", dir, t.dirs)
	}
	t.last = dir
	t.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	return dir
}

// lastDir is the directory the latest TempDir made.
func (t *runTB) lastDir() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// runCleanups runs every cleanup, last registered first; a cleanup that
// fails does not stop the others.
func (t *runTB) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		func() {
			defer func() {
				if p := recover(); p != nil {
					fmt.Fprintf(t.out, "stoatchaos: a cleanup failed: %v\n", p)
				}
			}()
			f()
		}()
	}
}
