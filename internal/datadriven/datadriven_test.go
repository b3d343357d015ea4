package datadriven

import (
	"strconv"
	"strings"
	"testing"
)

const script = `# a comment
add a=1 b=2
----
3

add a=2 b=2
----
5
`

// add prints the sum of a and b.
func add(c *Cmd) string {
	a, _ := strconv.Atoi(c.Str("a", "0"))
	b, _ := strconv.Atoi(c.Str("b", "0"))
	return strconv.Itoa(a + b)
}

func TestMismatchIsReported(t *testing.T) {
	_, err := runScript("s.txt", script, add, false)
	if err == nil || !strings.Contains(err.Error(), "s.txt:6: add: output differs") || !strings.Contains(err.Error(), "--- got\n4") {
		t.Fatalf("err = %v, want the second command reported at line 6 with output 4", err)
	}
}

func TestRewriteReplacesOutputsOnly(t *testing.T) {
	out, err := runScript("s.txt", script, add, true)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(script, "----\n5\n", "----\n4\n", 1)
	if out != want {
		t.Fatalf("rewritten script:\n%s\nwant:\n%s", out, want)
	}
	if _, err := runScript("s.txt", out, add, false); err != nil {
		t.Fatalf("the rewritten script fails: %v", err)
	}
}

func TestArgs(t *testing.T) {
	cmds, err := parse("s.txt", strings.Split("cmd isr=1,2,3 empty= flag\n----\n", "\n"))
	if err != nil || len(cmds) != 1 {
		t.Fatalf("parse: %v %v", cmds, err)
	}
	c := cmds[0]
	if got := c.Int32s(t, "isr"); len(got) != 3 || got[2] != 3 {
		t.Fatalf("isr = %v", got)
	}
	if got := c.Int32s(t, "empty"); got == nil || len(got) != 0 {
		t.Fatalf("empty = %v, want an empty list", got)
	}
	if !c.Has("flag") || c.Has("missing") || c.Str("missing", "d") != "d" {
		t.Fatal("Has/Str")
	}
	if c.Int32s(t, "missing") != nil {
		t.Fatal("a missing list is not nil")
	}
}

func TestCommandWithoutSeparator(t *testing.T) {
	if _, err := runScript("s.txt", "cmd a=1\n\n", add, false); err == nil || !strings.Contains(err.Error(), "s.txt:1") {
		t.Fatalf("err = %v", err)
	}
}
