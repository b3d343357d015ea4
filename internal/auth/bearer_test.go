package auth

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestBearerOK(t *testing.T) {
	req := func(h string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		return r
	}
	cases := []struct {
		token, header string
		want          bool
	}{
		{"", "", true},
		{"", "Bearer anything", true},
		{"s3cret", "Bearer s3cret", true},
		{"s3cret", "", false},
		{"s3cret", "Bearer s3cre", false},
		{"s3cret", "Bearer s3cret ", false},
		{"s3cret", "bearer s3cret", false},
		{"s3cret", "Basic czNjcmV0", false},
		{"s3cret", "s3cret", false},
	}
	for _, c := range cases {
		if got := BearerOK(req(c.header), c.token); got != c.want {
			t.Errorf("token %q, Authorization %q: %v, want %v", c.token, c.header, got, c.want)
		}
	}
	if !SecretEqual("a", "a") || SecretEqual("a", "ab") || SecretEqual("", "a") || !SecretEqual("", "") {
		t.Fatal("SecretEqual")
	}
}

// TestSecretsComparedInConstantTime fails on a token or password compared
// with == or != anywhere in the broker's code (a test for emptiness is
// fine): such a comparison returns as soon as a byte differs, which
// tells a guesser how much of the secret was right. Use SecretEqual or
// BearerOK.
func TestSecretsComparedInConstantTime(t *testing.T) {
	secret := regexp.MustCompile(`(?i)(token|password|passwd|secret)$`)
	named := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name
		case *ast.SelectorExpr:
			return e.Sel.Name
		}
		return ""
	}
	empty := func(e ast.Expr) bool {
		l, ok := e.(*ast.BasicLit)
		return ok && l.Kind == token.STRING && (l.Value == `""` || l.Value == "``")
	}
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			b, ok := n.(*ast.BinaryExpr)
			if !ok || b.Op != token.EQL && b.Op != token.NEQ || empty(b.X) || empty(b.Y) {
				return true
			}
			for _, side := range []ast.Expr{b.X, b.Y} {
				if name := named(side); secret.MatchString(name) {
					t.Errorf("%s: %s compared with %s: use auth.SecretEqual", fset.Position(b.Pos()), name, b.Op)
				}
			}
			return true
		})
		return nil
	})
	if err != nil || files < 100 {
		t.Fatalf("walked %d files: %v", files, err)
	}
}
