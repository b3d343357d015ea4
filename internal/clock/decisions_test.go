package clock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unixConversions turn a time into a number, or back: they drop the
// monotonic reading, so two such values compare on the wall clock.
var unixConversions = map[string]bool{"Unix": true, "UnixMilli": true, "UnixMicro": true, "UnixNano": true}

// goFiles lists the non-test Go files under dir (recursively) whose base
// name matches keep.
func goFiles(t *testing.T, dir string, keep func(string) bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") && keep(name) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no Go files in %s: has the tree moved?", dir)
	}
	return out
}

func isTimeNow(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "time" && sel.Sel.Name == "Now"
}

// fromTimeNow reports whether e is time.Now() or a variable the same
// file assigned time.Now() to, or either moved with Add. (A reading
// passed to another function is not followed.)
func fromTimeNow(e ast.Expr) bool {
	if isTimeNow(e) {
		return true
	}
	if call, ok := e.(*ast.CallExpr); ok {
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Add" {
			return fromTimeNow(sel.X)
		}
		return false
	}
	id, ok := e.(*ast.Ident)
	if !ok || id.Obj == nil {
		return false
	}
	as, ok := id.Obj.Decl.(*ast.AssignStmt)
	if !ok {
		return false
	}
	for i, l := range as.Lhs {
		if lid, ok := l.(*ast.Ident); ok && lid.Name == id.Name && i < len(as.Rhs) && isTimeNow(as.Rhs[i]) {
			return true
		}
	}
	return false
}

// TestRaftAndISRUseMonotonicTime: the Raft group, log shipping, the
// leader's ISR and high-watermark decisions and the broker's replica side
// only compare time.Now readings with each other (Sub, Since, After),
// which Go answers from the monotonic clock. A time turned into a number,
// or broker time, would bring the wall clock (or a clock anchored to it)
// into a decision that must not depend on it.
func TestRaftAndISRUseMonotonicTime(t *testing.T) {
	files := goFiles(t, "../replication", func(string) bool { return true })
	files = append(files, goFiles(t, "../broker", func(name string) bool { return strings.HasPrefix(name, "replica") })...)
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if strings.HasSuffix(imp.Path.Value, `/internal/clock"`) {
				t.Errorf("%s imports internal/clock: Raft and ISR decisions use time.Now's monotonic readings only", path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, isPkg := sel.X.(*ast.Ident)
			switch {
			case isPkg && pkg.Name == "time" && unixConversions[sel.Sel.Name]:
				t.Errorf("%s: time.%s: a time made from a number has no monotonic reading", fset.Position(call.Pos()), sel.Sel.Name)
			case !isPkg && unixConversions[sel.Sel.Name] && len(call.Args) == 0:
				t.Errorf("%s: .%s(): a time turned into a number loses its monotonic reading", fset.Position(call.Pos()), sel.Sel.Name)
			case sel.Sel.Name == "Round" && len(call.Args) == 1:
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Value == "0" {
					t.Errorf("%s: Round(0) strips the monotonic reading", fset.Position(call.Pos()))
				}
			}
			return true
		})
	}
}

// TestWallReadingsStayOutOfStamps: in the packages that write timestamps
// and decide retention and expiry, no time.Now reading is turned into a
// number (a record timestamp, a commit or transaction time, a deadline
// kept in an integer). Those take broker time (Clock.Now), which a step
// of the wall clock does not move; time.Now is for durations between two
// readings in one process.
func TestWallReadingsStayOutOfStamps(t *testing.T) {
	var files []string
	for _, dir := range []string{"broker", "partition", "groupcoord", "txncoord", "group", "coordinator", "auth", "producer", "txn", "storage"} {
		files = append(files, goFiles(t, filepath.Join("..", dir), func(string) bool { return true })...)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 0 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && unixConversions[sel.Sel.Name] && fromTimeNow(sel.X) {
				t.Errorf("%s: a time.Now reading becomes a number (.%s()): stamps and deadlines kept as numbers take broker time (clock.Clock.Now)", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
