package testcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Harness is what a Cluster needs from its owner: somewhere to log, a way
// to fail (Errorf goes on, Fatal stops the caller), cleanups and temporary
// directories. *testing.T, *testing.B and testing.TB satisfy it; Standalone
// is the implementation for a program (`moonmq chaos`), which must not link
// package testing.
type Harness interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}

// Main runs a package's tests and then removes the binary Binary built.
// Call it from TestMain with the *testing.M (its Run method is all Main
// needs, so this package does not import testing).
func Main(m interface{ Run() int }) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// Standalone is a Harness for a program rather than a test. Logf, Errorf
// and Fatalf write to its output; Errorf marks it failed and goes on;
// Fatal and Fatalf mark it failed and stop the function that Do runs (they
// must be called on Do's goroutine, as a test's Fatal must be called on
// the test's). TempDir makes directories under one base directory, which
// Close removes after running the cleanups, newest first.
type Standalone struct {
	dir string
	out io.Writer

	mu       sync.Mutex
	failed   bool
	cleanups []func()
	n        int
}

// NewStandalone returns a Standalone whose temporary directories go under
// dir (which it creates) and whose messages go to out.
func NewStandalone(dir string, out io.Writer) (*Standalone, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Standalone{dir: dir, out: out}, nil
}

// Dir is the base directory of the temporary directories.
func (s *Standalone) Dir() string { return s.dir }

// Helper does nothing: there is no test to attribute lines to.
func (s *Standalone) Helper() {}

// Logf writes one line to the output.
func (s *Standalone) Logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}

// Errorf writes the message and marks the harness failed.
func (s *Standalone) Errorf(format string, args ...any) {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	s.Logf("ERROR: "+format, args...)
}

// fatal is what Fatal panics with and Do recovers.
type fatal struct{ msg string }

// Fatal is Fatalf with fmt.Sprint's formatting.
func (s *Standalone) Fatal(args ...any) { s.fatal(fmt.Sprint(args...)) }

// Fatalf marks the harness failed and stops the function Do runs; Do
// returns the message as its error.
func (s *Standalone) Fatalf(format string, args ...any) { s.fatal(fmt.Sprintf(format, args...)) }

func (s *Standalone) fatal(msg string) {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	panic(fatal{msg})
}

// Failed reports whether Errorf, Fatal or Fatalf was called.
func (s *Standalone) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Cleanup registers f to run at Close, after every function registered
// later.
func (s *Standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// TempDir returns a new directory under Dir. It cannot fail the way a
// test's can: an error is a Fatal.
func (s *Standalone) TempDir() string {
	s.mu.Lock()
	s.n++
	dir := filepath.Join(s.dir, fmt.Sprintf("%03d", s.n))
	s.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.Fatalf("temporary directory: %v", err)
	}
	return dir
}

// Do runs f and returns the message of a Fatal or Fatalf it called as an
// error (nil if it returned normally). Any other panic goes on.
func (s *Standalone) Do(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			ft, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(ft.msg)
		}
	}()
	f()
	return nil
}

// Close runs the cleanups, newest first (a Fatal in one is reported and
// the others still run), then removes Dir unless keep.
func (s *Standalone) Close(keep bool) error {
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			break
		}
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.mu.Unlock()
		if err := s.Do(f); err != nil {
			s.Logf("ERROR: cleanup: %v", err)
		}
	}
	if keep {
		return nil
	}
	return os.RemoveAll(s.dir)
}
