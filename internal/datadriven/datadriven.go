// Package datadriven runs scenario scripts for the pure state machines'
// tests, in the style of etcd raft's testdata: a script is a list of
// commands, each followed by the output it must print,
//
//	fetch replica=2 offset=10 at=1s
//	----
//	hw=10 isr=[1 2 3]
//
// separated by blank lines; '#' starts a comment line. A test hands each
// command to a function of its own and compares what it returns with the
// expected text. Run the tests with -rewrite to write the outputs they
// produce into the scripts instead (then read the diff before committing).
//
// It is test support only: it owns no broker state and imports nothing of
// the broker's.
package datadriven

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "write the outputs the scripts produce into testdata instead of comparing")

// Cmd is one command of a script.
type Cmd struct {
	// Pos is file:line of the command, for failure messages.
	Pos string
	// Name is the command's first word.
	Name string
	// Args are the key=value words after it, in order (a bare word is a
	// key with the value "").
	Args []Arg
	// Expected is the text below the separator.
	Expected string

	line int // the command line's index in the file's lines
	end  int // the index after the last expected line
}

// Arg is one key=value word of a command.
type Arg struct{ Key, Value string }

// Has reports whether the command has an argument key.
func (c *Cmd) Has(key string) bool {
	for _, a := range c.Args {
		if a.Key == key {
			return true
		}
	}
	return false
}

// Str returns the value of key, or def when the command has none.
func (c *Cmd) Str(key, def string) string {
	for _, a := range c.Args {
		if a.Key == key {
			return a.Value
		}
	}
	return def
}

// Int returns key's value as an integer, or def; a malformed value fails
// t with the command's position.
func (c *Cmd) Int(t testing.TB, key string, def int64) int64 {
	t.Helper()
	v := c.Str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", c.Pos, key, v, err)
	}
	return n
}

// Int32s returns key's value, a comma-separated list of integers such as
// "1,2,3" (empty for ""), or nil when the command has no key.
func (c *Cmd) Int32s(t testing.TB, key string) []int32 {
	t.Helper()
	if !c.Has(key) {
		return nil
	}
	out := []int32{}
	for _, f := range strings.Split(c.Str(key, ""), ",") {
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Pos, key, err)
		}
		out = append(out, int32(n))
	}
	return out
}

// Fatalf fails t with the command's position in front of the message.
func (c *Cmd) Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s: %s: %s", c.Pos, c.Name, fmt.Sprintf(format, args...))
}

// Walk runs every *.txt script in dir as a subtest named after the file.
// Each script gets a fresh state from newRun, which returns the function
// that runs one command and returns its output.
func Walk(t *testing.T, dir string, newRun func(t *testing.T) func(*Cmd) string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripts in %s", dir)
	}
	sort.Strings(files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			RunFile(t, f, newRun(t))
		})
	}
}

// RunFile runs the script in path, command by command.
func RunFile(t *testing.T, path string, run func(*Cmd) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runScript(path, string(data), run, *rewrite)
	if err != nil {
		t.Fatal(err)
	}
	if *rewrite && out != string(data) {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runScript runs the script text, read from path. It returns the first
// output that differs from the expected one as an error or, with rewrite,
// the script with every output replaced by what run printed.
func runScript(path, text string, run func(*Cmd) string, rewrite bool) (string, error) {
	lines := strings.Split(text, "\n")
	cmds, err := parse(path, lines)
	if err != nil {
		return "", err
	}
	var out []string
	last := 0
	for _, c := range cmds {
		got := strings.TrimRight(run(c), "\n")
		if rewrite {
			out = append(out, lines[last:c.line+2]...)
			if got != "" {
				out = append(out, strings.Split(got, "\n")...)
			}
			last = c.end
			continue
		}
		if got != c.Expected {
			return "", fmt.Errorf("%s: %s: output differs (run with -rewrite to accept it)\n--- want\n%s\n--- got\n%s", c.Pos, c.Name, c.Expected, got)
		}
	}
	out = append(out, lines[last:]...)
	return strings.Join(out, "\n"), nil
}

// parse splits a script's lines into commands.
func parse(path string, lines []string) ([]*Cmd, error) {
	var cmds []*Cmd
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := &Cmd{Pos: fmt.Sprintf("%s:%d", path, i+1), line: i}
		words := strings.Fields(l)
		c.Name = words[0]
		for _, w := range words[1:] {
			k, v, _ := strings.Cut(w, "=")
			c.Args = append(c.Args, Arg{Key: k, Value: v})
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			return nil, fmt.Errorf("%s: command %q is not followed by a ---- line", c.Pos, c.Name)
		}
		j := i + 2
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" {
			j++
		}
		c.Expected = strings.Join(lines[i+2:j], "\n")
		c.end = j
		cmds = append(cmds, c)
		i = j
	}
	return cmds, nil
}
