package config

import (
	"strings"
	"testing"
)

func TestUserRefusals(t *testing.T) {
	// A valid SCRAM-SHA-256 credential: 32-byte keys, standard base64.
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	cases := []struct{ json, want string }{
		{`{"Server": {"Users": [{"Username": "app"}]}}`, `Users[0].Password`},
		{`{"Server": {"Users": [{"Password": "x"}]}}`, `Users[0].Username`},
		{`{"Server": {"Users": [{"Username": "a", "Password": "x"}, {"Username": "a", "Password": "y"}]}}`, `Users[1].Username`},
		{`{"Server": {"Users": [{"Username": "a", "Password": "x", "Scram": [{"Mechanism": "SCRAM-SHA-256", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `not both`},
		{`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-1", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `Users[0].Scram[0]`},
		{`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-256", "Salt": "c2FsdA==", "Iterations": 100, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `iterations`},
		{`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-512", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `64 bytes`},
		{`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-256", "Salt": "not base64!", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `Salt is not standard base64`},
		{`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-256", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}, {"Mechanism": "SCRAM-SHA-256", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}]}}`, `Users[0].Scram[1].Mechanism`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
	s, err := Parse([]byte(`{"Server": {"Users": [{"Username": "a", "Scram": [{"Mechanism": "SCRAM-SHA-256", "Salt": "c2FsdA==", "Iterations": 4096, "StoredKey": "` + key + `", "ServerKey": "` + key + `"}]}, {"Username": "b", "Password": "pw"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Users[0].Scram[0].Credential(); err != nil || len(c.StoredKey) != 32 || string(c.Salt) != "salt" {
		t.Fatalf("decoded credential %+v, %v", c, err)
	}
}

func TestTLSRefusals(t *testing.T) {
	cases := []struct{ json, want string }{
		{`{"Server": {"TLS": {}}}`, `TLS.CertFile`},
		{`{"Server": {"TLS": {"CertFile": "c"}}}`, `TLS.KeyFile`},
		{`{"Server": {"TLS": {"CertFile": "c", "KeyFile": "k", "RequireClientCert": true}}}`, `TLS.ClientCAFile`},
		{`{"Server": {"TLS": {"CertFile": "c", "KeyFile": "k", "MinVersion": "1.1"}}}`, `TLS.MinVersion`},
		{`{"Server": {"TLS": {"CertFile": "c", "KeyFile": "k", "Cert": "x"}}}`, `unknown key "Cert"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
	if _, err := Parse([]byte(`{"Server": {"TLS": {"CertFile": "c", "KeyFile": "k", "ClientCAFile": "ca", "RequireClientCert": true, "MinVersion": "1.3"}}}`)); err != nil {
		t.Fatal(err)
	}
}

func TestACLKeys(t *testing.T) {
	s, err := Parse([]byte(`{"Server": {"SuperUsers": ["User:admin"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.AllowEveryoneIfNoAclFound == nil || !*s.AllowEveryoneIfNoAclFound {
		t.Fatal("AllowEveryoneIfNoAclFound does not default to true")
	}
	if s, err = Parse([]byte(`{"Server": {"AllowEveryoneIfNoAclFound": false}}`)); err != nil || *s.AllowEveryoneIfNoAclFound {
		t.Fatalf("AllowEveryoneIfNoAclFound false: %v", err)
	}
	for _, p := range []string{"admin", "User:", "Group:x"} {
		if _, err := Parse([]byte(`{"Server": {"SuperUsers": ["` + p + `"]}}`)); err == nil || !strings.Contains(err.Error(), "SuperUsers[0]") {
			t.Errorf("SuperUsers %q: %v", p, err)
		}
	}
}

func TestConnectionLimitKeys(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"Server": {"MaxConnections": -1}}`, `key "MaxConnections"`},
		{`{"Server": {"MaxConnectionsPerIP": -5}}`, `key "MaxConnectionsPerIP"`},
	} {
		if _, err := Parse([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
	s, err := Parse([]byte(`{"Server": {"MaxConnections": 1000, "MaxConnectionsPerIP": 50}}`))
	if err != nil || s.MaxConnections != 1000 || s.MaxConnectionsPerIP != 50 {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestQuotaKeys(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"Server": {"Quotas": {"ProducerByteRate": -1}}}`, `key "Quotas.ProducerByteRate"`},
		{`{"Server": {"Quotas": {"ConsumerByteRate": -1}}}`, `key "Quotas.ConsumerByteRate"`},
		{`{"Server": {"Quotas": {"Principals": {"app": {}}}}}`, `Quotas.Principals[\"app\"]`},
		{`{"Server": {"Quotas": {"Principals": {"User:app": {"ConsumerByteRate": -5}}}}}`, `must not be negative`},
	} {
		if _, err := Parse([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.json, err, c.want)
		}
	}
	s, err := Parse([]byte(`{"Server": {"Quotas": {"ProducerByteRate": 1048576, "Principals": {"User:etl": {"ProducerByteRate": 0, "ConsumerByteRate": 10485760}}}}}`))
	if err != nil || s.Quotas.Principals["User:etl"].ConsumerByteRate != 10485760 {
		t.Fatalf("%+v %v", s.Quotas, err)
	}
}
