package interop

// Logins through third-party clients: kcat and confluent_kafka (librdkafka)
// with SASL and TLS, sarama with PLAIN over both handshake versions.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/testcerts"
)

const (
	secUser = "app"
	secPass = "app-secret"
)

// startSecureBroker runs a broker on loopback that requires logins.
func startSecureBroker(t *testing.T, edit ...func(*config.Server)) *app.Instance {
	t.Helper()
	cfg := config.Default()
	cfg.Port = 0
	cfg.MetricsPort = 0
	cfg.DataDir = t.TempDir()
	cfg.Users = []config.User{{Username: secUser, Password: secPass}}
	for _, e := range edit {
		e(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tl := newTestLog(t, "")
	in, err := app.Start(cfg, slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return in
}

// kcatPath finds kcat, or skips (fails with MOONMQ_REQUIRE_KCAT set).
func kcatPath(t *testing.T) string {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("MOONMQ_REQUIRE_KCAT") != "" {
			t.Fatal("kcat is required (apt-get install -y kcat)")
		}
		t.Skip("kcat not installed")
	}
	return kcat
}

// runKcat runs kcat with the given input and returns stdout, stderr and
// the exit error.
func runKcat(t *testing.T, kcat string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// kcatRoundTrip produces lines with kcat and reads them back with kcat,
// both with the given -X settings.
func kcatRoundTrip(t *testing.T, kcat, addr, topic string, settings ...string) {
	t.Helper()
	var x []string
	for _, s := range settings {
		x = append(x, "-X", s)
	}
	var lines []string
	for i := 0; i < 10; i++ {
		lines = append(lines, fmt.Sprintf("%s-%d", topic, i))
	}
	input := strings.Join(lines, "\n") + "\n"
	args := append([]string{"-b", addr, "-P", "-t", topic, "-p", "0", "-X", "topic.request.required.acks=all"}, x...)
	if _, stderr, err := runKcat(t, kcat, input, args...); err != nil {
		t.Fatalf("kcat -P %v: %v\n%s", settings, err, stderr)
	}
	args = append([]string{"-b", addr, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%s\n"}, x...)
	out, stderr, err := runKcat(t, kcat, "", args...)
	if err != nil {
		t.Fatalf("kcat -C %v: %v\n%s", settings, err, stderr)
	}
	if got := strings.TrimSpace(out); got != strings.TrimSpace(input) {
		t.Fatalf("kcat read back %q, want %q", got, input)
	}
}

func TestKcatSASL(t *testing.T) {
	kcat := kcatPath(t)
	in := startSecureBroker(t)
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			kcatRoundTrip(t, kcat, in.Addr(), strings.ToLower("kcat-"+mech),
				"security.protocol=SASL_PLAINTEXT", "sasl.mechanisms="+mech, "sasl.username="+secUser, "sasl.password="+secPass)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		_, stderr, err := runKcat(t, kcat, "", "-b", in.Addr(), "-L", "-m", "10",
			"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
			"-X", "sasl.username="+secUser, "-X", "sasl.password=guess")
		if err == nil {
			t.Fatal("kcat -L succeeded with a wrong password")
		}
		if !strings.Contains(stderr, "Authentication failed") {
			t.Fatalf("kcat did not report the failed login:\n%s", stderr)
		}
	})
	t.Run("no login", func(t *testing.T) {
		_, stderr, err := runKcat(t, kcat, "", "-b", in.Addr(), "-L", "-m", "5")
		if err == nil {
			t.Fatalf("kcat -L without SASL succeeded against a broker with users\n%s", stderr)
		}
	})
}

type rdkSecurityOut struct {
	stderr        string
	Client        string   `json:"client"`
	Librdkafka    string   `json:"librdkafka"`
	Produced      int      `json:"produced"`
	Consumed      []string `json:"consumed"`
	Errors        []string `json:"errors"`
	MetadataError string   `json:"metadata_error"`
}

// runRdkafkaSecurity runs testdata/rdkafka_security.py with librdkafka
// settings; n = 0 only asks for metadata.
func runRdkafkaSecurity(t *testing.T, py, addr, topic string, n int, settings map[string]string) rdkSecurityOut {
	t.Helper()
	js, _ := json.Marshal(settings)
	ctx := ctxTimeout(t, 90*time.Second)
	cmd := exec.CommandContext(ctx, py, "testdata/rdkafka_security.py", addr, topic, fmt.Sprint(n), string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("python stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("rdkafka_security.py: %v\n%s", err, stdout.String())
	}
	var out rdkSecurityOut
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bad output %q: %v", stdout.String(), err)
	}
	out.stderr = stderr.String()
	return out
}

func checkRdkafkaRoundTrip(t *testing.T, out rdkSecurityOut, n int) {
	t.Helper()
	var errs []string
	for _, e := range out.Errors {
		if strings.Contains(e, "Broker transport failure") {
			// librdkafka 2.0.2 once reported a transport failure on
			// its group-coordinator connection right after ApiVersions,
			// before its SASL handshake ("after 0ms in state DOWN"; the
			// broker logged no error and closed nothing), and
			// reconnected; seen once, under the race detector. The
			// round trip below must still be complete, and a refused
			// login is reported differently ("Authentication failed").
			t.Logf("librdkafka %s: transient connection error (reconnected): %s", out.Librdkafka, e)
			continue
		}
		errs = append(errs, e)
	}
	if out.MetadataError != "" || len(errs) > 0 {
		t.Fatalf("librdkafka %s: metadata error %q, errors %v", out.Librdkafka, out.MetadataError, errs)
	}
	if out.Produced != n || len(out.Consumed) != n {
		t.Fatalf("librdkafka %s: %d acknowledged, %d read back, want %d", out.Librdkafka, out.Produced, len(out.Consumed), n)
	}
	for i, v := range out.Consumed {
		if v != fmt.Sprintf("v%d", i) {
			t.Fatalf("record %d read back as %q", i, v)
		}
	}
}

func TestLibrdkafkaSASL(t *testing.T) {
	py := python(t)
	in := startSecureBroker(t)
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			out := runRdkafkaSecurity(t, py, in.Addr(), strings.ToLower("rdk-"+mech), 20, map[string]string{
				"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mech,
				"sasl.username": secUser, "sasl.password": secPass,
			})
			checkRdkafkaRoundTrip(t, out, 20)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		out := runRdkafkaSecurity(t, py, in.Addr(), "rdk-wrong", 0, map[string]string{
			"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
			"sasl.username": secUser, "sasl.password": "guess",
		})
		// librdkafka logs login failures rather than passing them to
		// error_cb.
		if out.MetadataError == "" || !strings.Contains(out.stderr, "Authentication failed") {
			t.Fatalf("librdkafka with a wrong password: metadata error %q, errors %v", out.MetadataError, out.Errors)
		}
	})
}

// TestSaramaSASLPlain logs in with sarama's PLAIN over SaslHandshake v1
// (SaslAuthenticate) and v0 (bare tokens).
func TestSaramaSASLPlain(t *testing.T) {
	in := startSecureBroker(t)
	for name, version := range map[string]int16{"handshake-v0": sarama.SASLHandshakeV0, "handshake-v1": sarama.SASLHandshakeV1} {
		t.Run(name, func(t *testing.T) {
			cfg := saramaConfig(sarama.V2_8_0_0)
			cfg.Net.SASL.Enable = true
			cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
			cfg.Net.SASL.Version = version
			// sarama's v0 flow cannot follow an ApiVersions request.
			cfg.ApiVersionsRequest = version != sarama.SASLHandshakeV0
			cfg.Net.SASL.User, cfg.Net.SASL.Password = secUser, secPass
			cfg.Producer.Partitioner = sarama.NewManualPartitioner
			saramaIdempotent(cfg) // the records are read back by position
			topic := "sarama-" + name
			prod, err := sarama.NewSyncProducer([]string{in.Addr()}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			for i := 0; i < 5; i++ {
				if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
			cons, err := sarama.NewConsumer([]string{in.Addr()}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			timeout := time.After(30 * time.Second)
			for i := 0; i < 5; i++ {
				select {
				case m := <-pc.Messages():
					if string(m.Value) != fmt.Sprint(i) {
						t.Fatalf("record %d is %q", i, m.Value)
					}
				case err := <-pc.Errors():
					t.Fatalf("consume: %v", err)
				case <-timeout:
					t.Fatalf("read %d of 5 records", i)
				}
			}

			cfg.Net.SASL.Password = "guess"
			if _, err := sarama.NewClient([]string{in.Addr()}, cfg); err == nil {
				t.Fatal("sarama logged in with a wrong password")
			}
		})
	}
}

func tlsCerts(t *testing.T) *testcerts.Set {
	t.Helper()
	c, err := testcerts.Generate(t.TempDir(), "client-app")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKcatTLS(t *testing.T) {
	kcat := kcatPath(t)
	c := tlsCerts(t)
	t.Run("SSL", func(t *testing.T) {
		in := startSecureBroker(t, func(s *config.Server) {
			s.Users = nil
			s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile}
		})
		kcatRoundTrip(t, kcat, in.Addr(), "kcat-ssl", "security.protocol=SSL", "ssl.ca.location="+c.CAFile)
		if _, _, err := runKcat(t, kcat, "", "-b", in.Addr(), "-L", "-m", "5"); err == nil {
			t.Fatal("plaintext kcat -L succeeded against a TLS port")
		}
	})
	t.Run("SASL_SSL", func(t *testing.T) {
		in := startSecureBroker(t, func(s *config.Server) {
			s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile}
		})
		kcatRoundTrip(t, kcat, in.Addr(), "kcat-sasl-ssl", "security.protocol=SASL_SSL", "ssl.ca.location="+c.CAFile,
			"sasl.mechanisms=SCRAM-SHA-256", "sasl.username="+secUser, "sasl.password="+secPass)
	})
	t.Run("mutual TLS", func(t *testing.T) {
		in := startSecureBroker(t, func(s *config.Server) {
			s.Users = nil
			s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile, RequireClientCert: true}
		})
		kcatRoundTrip(t, kcat, in.Addr(), "kcat-mtls", "security.protocol=SSL", "ssl.ca.location="+c.CAFile,
			"ssl.certificate.location="+c.ClientCertFile, "ssl.key.location="+c.ClientKeyFile)
		if _, stderr, err := runKcat(t, kcat, "", "-b", in.Addr(), "-L", "-m", "5",
			"-X", "security.protocol=SSL", "-X", "ssl.ca.location="+c.CAFile); err == nil {
			t.Fatalf("kcat without a client certificate listed metadata\n%s", stderr)
		}
	})
}

func TestLibrdkafkaSASLOverTLS(t *testing.T) {
	py := python(t)
	c := tlsCerts(t)
	in := startSecureBroker(t, func(s *config.Server) {
		s.TLS = &config.TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile, RequireClientCert: true}
	})
	out := runRdkafkaSecurity(t, py, in.Addr(), "rdk-sasl-ssl", 20, map[string]string{
		"security.protocol": "SASL_SSL", "ssl.ca.location": c.CAFile,
		"ssl.certificate.location": c.ClientCertFile, "ssl.key.location": c.ClientKeyFile,
		"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": secUser, "sasl.password": secPass,
	})
	checkRdkafkaRoundTrip(t, out, 20)
}

// TestKcatACLDenied: librdkafka reports the authorization error a denied
// principal gets.
func TestKcatACLDenied(t *testing.T) {
	kcat := kcatPath(t)
	in := startSecureBroker(t, func(s *config.Server) {
		s.Users = append(s.Users, config.User{Username: "admin", Password: "admin-pw"})
		s.SuperUsers = []string{"User:admin"}
		f := false
		s.AllowEveryoneIfNoAclFound = &f
	})
	admin := []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
		"-X", "sasl.username=admin", "-X", "sasl.password=admin-pw"}
	app := []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
		"-X", "sasl.username=" + secUser, "-X", "sasl.password=" + secPass}
	if _, stderr, err := runKcat(t, kcat, "x\n", append([]string{"-b", in.Addr(), "-P", "-t", "guarded", "-p", "0"}, admin...)...); err != nil {
		t.Fatalf("admin produces: %v\n%s", err, stderr)
	}
	_, stderr, err := runKcat(t, kcat, "", append([]string{"-b", in.Addr(), "-C", "-t", "guarded", "-p", "0", "-o", "beginning", "-e", "-q"}, app...)...)
	if err == nil || !strings.Contains(strings.ToLower(stderr), "authorization failed") {
		t.Fatalf("kcat as %s on a topic without an ACL: err %v\n%s", secUser, err, stderr)
	}
}
