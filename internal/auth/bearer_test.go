package auth

import (
	"net/http"
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
