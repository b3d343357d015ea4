package replication_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/cli"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/testcerts"
)

// Replication TLS (Replication.TLS): the replication port serves HTTPS and
// every replica dials its peers (Raft, shipping) over HTTPS with the
// group's CA, presenting its own certificate where a peer requires one.

// capLog keeps a replica's log lines for the test to look for, and passes
// them to t.Log until the test ends.
type capLog struct {
	mu    sync.Mutex
	t     testing.TB
	lines []string
	done  bool
}

func (l *capLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := string(bytes.TrimRight(p, "\n"))
	l.lines = append(l.lines, line)
	if !l.done {
		l.t.Log(line)
	}
	return len(p), nil
}

// has reports whether a line contains every one of parts.
func (l *capLog) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// waitLog waits until l has a line containing every one of parts.
func waitLog(t *testing.T, l *capLog, within time.Duration, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !l.has(parts...) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q", parts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startCaptured(t *testing.T, n *node, l *capLog) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", n.id)
	in, err := app.Start(n.cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	n.in = in
}

// tlsGroup starts a three-replica group (failover mode, or static with
// replica 1 leading) whose replica i gets edit(i, cfg); replica 1 has Role
// leader so it leads first.
func tlsGroup(t *testing.T, failover bool, edit func(i int, c *config.Server)) ([]*node, []*capLog) {
	ns := make([]*node, 3)
	logs := make([]*capLog, 3)
	for i := range ns {
		cfg := config.Default()
		cfg.Port = freePort(t)
		cfg.Host = "127.0.0.1"
		cfg.MetricsPort = 0
		cfg.DataDir = t.TempDir()
		cfg.Replication = &config.Replication{
			Enabled: true, ReplicaId: i + 1, Role: "follower",
			ReplicateHost: "127.0.0.1", ReplicatePort: freePort(t),
			Token: token, AckTimeout: 2, IsrLagSeconds: 1,
			Failover: config.Failover{Enabled: failover},
		}
		if i == 0 {
			cfg.Replication.Role = "leader"
		}
		ns[i] = &node{id: i + 1, cfg: cfg}
		logs[i] = &capLog{t: t}
	}
	t.Cleanup(func() {
		for _, l := range logs {
			l.mu.Lock()
			l.done = true
			l.mu.Unlock()
		}
	})
	for i, n := range ns {
		r := n.cfg.Replication
		r.ClientAddress = n.addr()
		for _, o := range ns {
			if o != n {
				r.Peers = append(r.Peers, config.Peer{Id: o.id, Address: o.replAddr(), ClientAddress: o.addr()})
			}
		}
		if edit != nil {
			edit(i, &n.cfg)
		}
		if err := n.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range ns {
		startCaptured(t, n, logs[i])
	}
	t.Cleanup(func() {
		for i := len(ns) - 1; i >= 0; i-- {
			if ns[i].in != nil {
				ns[i].in.Close()
			}
		}
	})
	return ns, logs
}

// httpsClient trusts ca and, if cert is set, presents it.
func httpsClient(ca *x509.CertPool, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: ca}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// tlsStatus reads a replica's /replication/status over HTTPS.
func tlsStatus(t *testing.T, c *http.Client, n *node) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+n.replAddr()+"/replication/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("status %s: %v", body, err)
	}
	return out
}

// tlsServingLeader is servingLeader over HTTPS.
func tlsServingLeader(t *testing.T, c *http.Client, ns []*node, not int, within time.Duration) *node {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range ns {
			if n.in == nil || n.id == not {
				continue
			}
			st := tlsStatus(t, c, n)
			raft, _ := st["raft"].(map[string]any)
			if st["role"] == "leader" && raft["serving"] == true {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no serving leader within %v", within)
	return nil
}

// tlsWaitISR waits until replica n reports the committed ISR want.
func tlsWaitISR(t *testing.T, c *http.Client, n *node, want []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var got []int
		raft, _ := tlsStatus(t, c, n)["raft"].(map[string]any)
		if raft["has_isr"] == true {
			list, _ := raft["isr"].([]any)
			for _, v := range list {
				got = append(got, int(v.(float64)))
			}
		}
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: ISR %v, want %v", n.id, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSameLog waits until every running replica holds byte for byte
// leader's copy of partition 0 of topic.
func waitSameLog(t *testing.T, ns []*node, leader *node, topic string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		want, wantEnd, err := leader.in.Broker.ReadLog(topic, 0)
		diff := ""
		for _, n := range ns {
			if n.in == nil || n == leader || err != nil {
				continue
			}
			got, gotEnd, err := n.in.Broker.ReadLog(topic, 0)
			if err != nil || gotEnd != wantEnd || !bytes.Equal(got, want) {
				diff = fmt.Sprintf("replica %d: end %d, leader %d's end %d (err %v)", n.id, gotEnd, leader.id, wantEnd, err)
				break
			}
		}
		if err == nil && diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas differ: %s (leader err %v)", diff, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failoverOverTLS runs a failover group through its paces with every
// replication request on TLS: a leader is elected, acks=all records reach
// every replica, the leader is stopped and another takes over without
// losing an acknowledged record, and the old leader rejoins as a follower.
func failoverOverTLS(t *testing.T, ns []*node, c *http.Client) {
	t.Helper()
	ctx := context.Background()
	const topic = "tls-events"
	first := tlsServingLeader(t, c, ns, 0, 60*time.Second)
	if first.id != 1 {
		t.Fatalf("replica %d leads first; want 1 (the only one with Role leader)", first.id)
	}
	// Every replica in the committed ISR: the followers fetch over TLS.
	tlsWaitISR(t, c, first, []int{1, 2, 3}, 60*time.Second)

	seeds := []string{ns[0].addr(), ns[1].addr(), ns[2].addr()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]string{}
	produce := func(from, n int, mustAck bool) {
		for i := from; i < from+n; i++ {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			v := fmt.Sprintf("value-%d", i)
			r, err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).First()
			cancel()
			if err != nil {
				if mustAck {
					t.Fatalf("record %d not acknowledged: %v", i, err)
				}
				t.Logf("record %d not acknowledged: %v", i, err)
				continue
			}
			if old, dup := acked[r.Offset]; dup {
				t.Fatalf("offset %d acknowledged for %q and %q", r.Offset, old, v)
			}
			acked[r.Offset] = v
		}
	}
	produce(0, 50, true)
	waitSameLog(t, ns, first, topic, 30*time.Second)

	first.stop()
	second := tlsServingLeader(t, c, ns, first.id, 60*time.Second)
	t.Logf("replica %d serves after the failover", second.id)
	produce(50, 50, false)
	if len(acked) < 90 {
		t.Fatalf("only %d of 100 records acknowledged", len(acked))
	}
	// Every acknowledged record is on the new leader, where it was
	// acknowledged.
	cons, err := kgo.NewClient(kgo.SeedBrokers(second.addr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var maxAcked int64 = -1
	for off := range acked {
		maxAcked = max(maxAcked, off)
	}
	got := map[int64]string{}
	last := int64(-1)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for last < maxAcked {
		fs := cons.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("consumed up to %d; want %d", last, maxAcked)
		}
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			got[r.Offset] = string(r.Value)
		})
	}
	for off, v := range acked {
		if got[off] != v {
			t.Fatalf("offset %d: got %q, acknowledged %q", off, got[off], v)
		}
	}

	// The old leader comes back and follows the new one over TLS.
	first.start(t, &testLog{t: t, done: true})
	deadline := time.Now().Add(60 * time.Second)
	for {
		second = tlsServingLeader(t, c, ns, first.id, 30*time.Second)
		st := tlsStatus(t, c, first)
		_, wantEnd, err1 := second.in.Broker.ReadLog(topic, 0)
		_, gotEnd, err2 := first.in.Broker.ReadLog(topic, 0)
		if st["role"] == "follower" && st["leader"] == float64(second.id) && err1 == nil && err2 == nil && gotEnd == wantEnd {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old leader did not rejoin: status %v, end %d vs %d", st, gotEnd, wantEnd)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitSameLog(t, ns, second, topic, 30*time.Second)
}

// plainToTLSPort checks that plain HTTP, even with the right token, gets
// no status from a TLS replication port.
func plainToTLSPort(t *testing.T, n *node) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.replAddr()+"/replication/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return // refused outright: fine too
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS server") || strings.Contains(string(body), "replicaId") {
		t.Fatalf("plain HTTP to the TLS replication port: %s %q", resp.Status, body)
	}
}

func TestReplicationTLSFailover(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	ns, logs := tlsGroup(t, true, func(_ int, c *config.Server) {
		c.Replication.TLS = &config.TLS{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.CAFile}
	})
	c := httpsClient(certs.CAs, nil)
	failoverOverTLS(t, ns, c)

	// Plain HTTP is answered 400 and logged, never with the status.
	plainToTLSPort(t, ns[1])
	waitLog(t, logs[1], 10*time.Second, "TLS handshake with a client of the replication port failed", "client sent an HTTP request to an HTTPS server")
	// The token still applies over TLS.
	req, _ := http.NewRequest(http.MethodGet, "https://"+ns[1].replAddr()+"/replication/status", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token over TLS: %s", resp.Status)
	}
}

// TestReplicationTLSStatic: a static group's followers find the leader
// (its status endpoint) and copy its logs over TLS.
func TestReplicationTLSStatic(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir(), "unused")
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := tlsGroup(t, false, func(_ int, c *config.Server) {
		c.Replication.TLS = &config.TLS{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.CAFile, MinVersion: "1.3"}
	})
	cl := client(t, ns[0].addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 3, nil, "static-tls"); err != nil {
		t.Fatal(err)
	}
	produceSync(t, cl, "static-tls", 0, 30)
	waitIdentical(t, ns, "static-tls", 3)
	c := httpsClient(certs.CAs, nil)
	for _, n := range ns[1:] {
		if st := tlsStatus(t, c, n); st["leader"] != float64(1) {
			t.Fatalf("replica %d follows %v", n.id, st["leader"])
		}
	}
}

// peerSet is a CA and, per replica, a certificate for 127.0.0.1 that
// serves as both server and client certificate (serverAuth and
// clientAuth), as mutual TLS on the replication port needs.
type peerSet struct {
	caFile string
	cas    *x509.CertPool
	certs  map[int][2]string // replica id -> cert file, key file
}

func peerCerts(t *testing.T, ids ...int) *peerSet {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "replication CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	s := &peerSet{caFile: filepath.Join(dir, "ca.pem"), cas: x509.NewCertPool(), certs: map[int][2]string{}}
	s.cas.AddCert(ca)
	write := func(path, typ string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(s.caFile, "CERTIFICATE", caDER)
	for _, id := range ids {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(10 + id)), Subject: pkix.Name{CommonName: fmt.Sprintf("replica-%d", id)},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		files := [2]string{filepath.Join(dir, fmt.Sprintf("replica-%d.pem", id)), filepath.Join(dir, fmt.Sprintf("replica-%d-key.pem", id))}
		write(files[0], "CERTIFICATE", der)
		write(files[1], "PRIVATE KEY", keyDER)
		s.certs[id] = files
	}
	return s
}

func (s *peerSet) tls(id int, mutual bool) *config.TLS {
	return &config.TLS{CertFile: s.certs[id][0], KeyFile: s.certs[id][1], ClientCAFile: s.caFile, RequireClientCert: mutual}
}

func (s *peerSet) keyPair(t *testing.T, id int) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(s.certs[id][0], s.certs[id][1])
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestReplicationMutualTLSFailover(t *testing.T) {
	pc := peerCerts(t, 1, 2, 3)
	ns, logs := tlsGroup(t, true, func(i int, c *config.Server) {
		c.Replication.TLS = pc.tls(i+1, true)
	})
	// The operator's client: any certificate the group's CA signed.
	c := httpsClient(pc.cas, pc.keyPair(t, 1))
	failoverOverTLS(t, ns, c)

	// Without a client certificate the handshake is refused (with the
	// right CA and token), and the refusal is logged.
	req, _ := http.NewRequest(http.MethodGet, "https://"+ns[1].replAddr()+"/replication/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := httpsClient(pc.cas, nil).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("no client certificate: %s", resp.Status)
	} else if !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("no client certificate: %v", err)
	}
	waitLog(t, logs[1], 10*time.Second, "TLS handshake with a client of the replication port failed", "client didn't provide a certificate")
	plainToTLSPort(t, ns[2])

	// moonmq status through mutual TLS: from the replica's config file,
	// and with flags only.
	n := ns[1]
	b, err := json.Marshal(config.File{Server: n.cfg})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "moonmq.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Status(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, stderr := runCLI("--config", path)
	if code != 0 || !strings.Contains(out, "replication status from "+n.replAddr()) || !strings.Contains(out, fmt.Sprintf("replica %d:", n.id)) {
		t.Fatalf("moonmq status --config: %d %q %q", code, out, stderr)
	}
	code, out, stderr = runCLI("--addr", n.replAddr(), "--token", token, "--cacert", pc.caFile,
		"--cert", pc.certs[3][0], "--key", pc.certs[3][1], "--json")
	var doc map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc["replicaId"] != float64(n.id) {
		t.Fatalf("moonmq status --cacert --cert --key: %d %q %q", code, out, stderr)
	}
	code, _, stderr = runCLI("--addr", n.replAddr(), "--token", token, "--cacert", pc.caFile)
	if code != 1 || !strings.Contains(stderr, "requires a client certificate") {
		t.Fatalf("moonmq status without --cert: %d %q", code, stderr)
	}
	code, _, stderr = runCLI("--addr", n.replAddr(), "--token", token)
	if code != 1 || !strings.Contains(stderr, "serves TLS: pass --cacert") {
		t.Fatalf("moonmq status without TLS: %d %q", code, stderr)
	}
}

// TestReplicationTLSMismatch: a replica whose TLS does not fit the group's
// cannot join: no Raft message or fetch gets through, it stays out of the
// committed ISR while the others serve acks=all, and the log says why on
// both sides.
func TestReplicationTLSMismatch(t *testing.T) {
	group := peerCerts(t, 1, 2, 3)
	stranger := peerCerts(t, 3)
	cases := []struct {
		name   string
		third  *config.TLS // replica 3's Replication.TLS
		mutual bool
		// log lines expected on replica 3 and on the leader.
		third3, leader []string
	}{
		{name: "wrong CA", third: stranger.tls(3, false),
			third3: []string{"TLS with a peer failed", "does not verify against Replication.TLS.ClientCAFile", "unknown authority"},
			leader: []string{"TLS with a peer failed", "peer=3", "unknown authority"}},
		{name: "wrong CA, mutual TLS", third: stranger.tls(3, true), mutual: true,
			third3: []string{"TLS with a peer failed", "unknown authority"},
			leader: []string{"TLS with a peer failed", "peer=3", "unknown authority"}},
		{name: "TLS off on replica 3", third: nil,
			third3: []string{"TLS with a peer failed", "this replica sent plain HTTP (it has no Replication.TLS)"},
			leader: []string{"TLS with a peer failed", "peer=3", "does not speak TLS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, logs := tlsGroup(t, true, func(i int, c *config.Server) {
				if i == 2 {
					c.Replication.TLS = tc.third
					return
				}
				c.Replication.TLS = group.tls(i+1, tc.mutual)
			})
			c := httpsClient(group.cas, group.keyPair(t, 1))
			leader := tlsServingLeader(t, c, ns[:2], 0, 60*time.Second)
			tlsWaitISR(t, c, leader, []int{1, 2}, 30*time.Second)

			cl := client(t, leader.addr(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(30*time.Second))
			if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 3, nil, "mismatch"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 10 {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "mismatch", Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			waitSameLog(t, ns[:2], leader, "mismatch", 30*time.Second)
			waitLog(t, logs[2], 30*time.Second, tc.third3...)
			waitLog(t, logs[leader.id-1], 30*time.Second, tc.leader...)
			// Still outside after all that, with nothing copied.
			tlsWaitISR(t, c, leader, []int{1, 2}, time.Second)
			if _, end, err := ns[2].in.Broker.ReadLog("mismatch", 0); err == nil && end > 0 {
				t.Fatalf("replica 3 copied %d records", end)
			}
		})
	}
}

// TestReplicationTLSConfigErrors: files that cannot be read, or a
// certificate the peers would refuse, stop the start naming the key.
func TestReplicationTLSConfigErrors(t *testing.T) {
	a, err := testcerts.Generate(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := testcerts.Generate(t.TempDir(), "y")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tls  config.TLS
		want []string
	}{
		{config.TLS{CertFile: "/nonexistent/cert.pem", KeyFile: a.ServerKeyFile, ClientCAFile: a.CAFile},
			[]string{`"Replication.TLS.CertFile"/"Replication.TLS.KeyFile"`, "/nonexistent/cert.pem"}},
		{config.TLS{CertFile: a.ServerCertFile, KeyFile: a.ClientKeyFile, ClientCAFile: a.CAFile},
			[]string{`"Replication.TLS.CertFile"/"Replication.TLS.KeyFile"`, "does not match"}},
		{config.TLS{CertFile: a.ServerCertFile, KeyFile: a.ServerKeyFile, ClientCAFile: "/nonexistent/ca.pem"},
			[]string{`"Replication.TLS.ClientCAFile"`, "no such file"}},
		{config.TLS{CertFile: a.ServerCertFile, KeyFile: a.ServerKeyFile, ClientCAFile: a.ServerKeyFile},
			[]string{`"Replication.TLS.ClientCAFile"`, "holds no PEM certificate"}},
		// Signed by another CA than the group's: every peer would refuse it.
		{config.TLS{CertFile: a.ServerCertFile, KeyFile: a.ServerKeyFile, ClientCAFile: b.CAFile},
			[]string{`"Replication.TLS.CertFile"`, "does not verify as a server", "unknown authority"}},
		// Mutual TLS makes the certificate a client certificate too: a
		// serverAuth-only one would fail every peer's handshake.
		{config.TLS{CertFile: a.ServerCertFile, KeyFile: a.ServerKeyFile, ClientCAFile: a.CAFile, RequireClientCert: true},
			[]string{`"Replication.TLS.CertFile"`, "does not verify as a client (clientAuth", "incompatible key usage"}},
		// A client-only certificate cannot serve the port.
		{config.TLS{CertFile: a.ClientCertFile, KeyFile: a.ClientKeyFile, ClientCAFile: a.CAFile},
			[]string{`"Replication.TLS.CertFile"`, "does not verify as a server (serverAuth)"}},
	}
	for i, tc := range cases {
		cfg := config.Default()
		cfg.Host, cfg.Port, cfg.MetricsPort, cfg.DataDir = "127.0.0.1", freePort(t), 0, t.TempDir()
		cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 1, Role: "leader",
			ReplicateHost: "127.0.0.1", ReplicatePort: freePort(t), ClientAddress: cfg.ClientListenAddr(), Token: token,
			Peers: []config.Peer{{Id: 2, Address: "127.0.0.1:1", ClientAddress: "127.0.0.1:2"}}}
		tlsCfg := tc.tls
		cfg.Replication.TLS = &tlsCfg
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		in, err := app.Start(cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			in.Close()
			t.Fatalf("case %d: started", i)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("case %d: %v; want %q in it", i, err, w)
			}
		}
	}
}
