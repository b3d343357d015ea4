package main

// Clock steps: broker processes whose wall clock the test moves an hour
// forward and an hour back while they run (clock.OffsetFileEnv), as an
// operator's `date -s` or a misconfigured NTP would. Retention, producer-id,
// transactional-id and offsets expiry, transaction timeouts, group
// sessions and SCRAM logins keep to broker time: nothing goes earlier than
// its limit, and what is due still goes when due.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/status"
)

// startProcEnv is startProc with env added to the process's environment.
func startProcEnv(t *testing.T, configPath string, port, mport int, env []string) *proc {
	t.Helper()
	p := &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("127.0.0.1:%d", mport)}
	cmd := exec.Command(binary, "serve", "--config", configPath)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd, p)
}

// clockProc is a broker process whose wall clock the test steps.
type clockProc struct {
	*proc
	offsetFile string
}

func startClockProc(t *testing.T, extra string) *clockProc {
	t.Helper()
	port, mport := freePort(t), freePort(t)
	off := filepath.Join(t.TempDir(), "clock-offset")
	p := startProcEnv(t, writeConfig(t, t.TempDir(), port, mport, extra), port, mport, []string{clock.OffsetFileEnv + "=" + off})
	if !strings.Contains(p.log(), "TEST MODE: the wall clock is moved") {
		t.Fatalf("the broker did not warn that its wall clock is a test's:\n%s", p.log())
	}
	return &clockProc{proc: p, offsetFile: off}
}

func (p *clockProc) stats(t *testing.T) status.Stats {
	t.Helper()
	return brokerStats(t, p.metrics)
}

// step sets the process's wall clock d from the real one and waits until
// the broker reports it (its watcher looks every second), so that every
// timer from then on runs with the stepped clock in reach.
func (p *clockProc) step(t *testing.T, d time.Duration) {
	t.Helper()
	if err := clock.WriteOffset(p.offsetFile, d); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		skew := time.Duration(p.stats(t).WallClockSkewMs) * time.Millisecond
		if (skew - d).Abs() < time.Second {
			t.Logf("wall clock stepped to %v from real time", d)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker reports its wall clock %v from broker time, want %v", skew, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *clockProc) expired(t *testing.T) status.Expired {
	t.Helper()
	return p.stats(t).Expired
}

func createTopics(t *testing.T, adm *kadm.Client, configs map[string]*string, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, 1, 1, configs, names...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestClockStepRetention: a topic with retention.ms of 10 s holds records
// stamped 4 s ago. Stepped an hour ahead, the broker keeps them until they
// are 10 s old by broker time and then deletes them; stepped an hour
// behind, it still deletes new ones when they are due, not an hour late.
// (Kafka compares record timestamps with its wall clock: the step ahead
// would delete them at once, the step back keep them an hour more.)
func TestClockStepRetention(t *testing.T) {
	const retention = 10 * time.Second
	p := startClockProc(t, `, "RetentionCheckMs": 100`)
	// Uncompressed, so that each batch fills a segment.
	cl := newClient(t, p.addr, kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	createTopics(t, adm, map[string]*string{
		"retention.ms":  kadm.StringPtr(fmt.Sprint(retention.Milliseconds())),
		"segment.bytes": kadm.StringPtr("1024"),
	}, "ahead", "behind")

	// fill writes three batches stamped 4 s ago and a current one, each
	// too big to share a 1 KiB segment, so the three old ones are alone
	// in closed segments; it returns their timestamp.
	fill := func(topic string) time.Time {
		t.Helper()
		ts := time.Now().Add(-4 * time.Second).Truncate(time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 3 {
			r := &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte{'a' + byte(i)}, 800), Timestamp: ts}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte("n"), 800)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	logStart := func(topic string) int64 {
		t.Helper()
		for _, pt := range p.stats(t).Partitions {
			if pt.Topic == topic {
				return pt.LogStartOffset
			}
		}
		t.Fatalf("/stats lists no partition of %s", topic)
		return 0
	}
	// deletedWhenDue watches the topic's log start: it must stay at 0
	// until the records are retention old and be past them soon after.
	deletedWhenDue := func(topic string, ts time.Time) {
		t.Helper()
		due := ts.Add(retention)
		for {
			start := logStart(topic)
			now := time.Now()
			if start > 0 {
				if now.Before(due.Add(-500 * time.Millisecond)) {
					t.Fatalf("%s: retention deleted records %v old; retention.ms is %v", topic, now.Sub(ts).Round(time.Millisecond), retention)
				}
				if start != 3 {
					t.Fatalf("%s: log start %d after retention, want 3 (the three old segments)", topic, start)
				}
				t.Logf("%s: deleted when %v old", topic, now.Sub(ts).Round(100*time.Millisecond))
				return
			}
			if now.After(due.Add(5 * time.Second)) {
				t.Fatalf("%s: records %v old are still there; retention.ms is %v", topic, now.Sub(ts).Round(time.Millisecond), retention)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ts := fill("ahead")
	p.step(t, time.Hour)
	deletedWhenDue("ahead", ts)

	p.step(t, -time.Hour)
	ts = fill("behind")
	deletedWhenDue("behind", ts)
	p.step(t, 0)
	if n := strings.Count(p.log(), "the wall clock moved against broker time"); n != 3 {
		t.Fatalf("the broker logged %d wall clock steps, want 3 (+1h, -2h, +1h)", n)
	}
}

// TestClockStepProducerAndTransactionExpiry: with producer.id.expiration.ms
// and transactional.id.expiration.ms at 30 minutes and a transaction open
// with a one-minute timeout, a step an hour ahead expires no producer and
// no transactional id and does not abort the transaction. Stamps taken
// while the wall clock is an hour behind do not make them look an hour
// old once it is back either.
func TestClockStepProducerAndTransactionExpiry(t *testing.T) {
	p := startClockProc(t, `, "ProducerIdExpirationMs": 1800000, "ProducerIdExpirationCheckMs": 100,
		"TransactionalIdExpirationMs": 1800000, "TransactionalIdExpirationCheckMs": 100`)
	adm := kadm.NewClient(newClient(t, p.addr))
	createTopics(t, adm, nil, "idem", "txn")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	idem := newClient(t, p.addr, kgo.DefaultProduceTopic("idem"))
	late := newClient(t, p.addr, kgo.DefaultProduceTopic("idem"))
	done := newClient(t, p.addr, kgo.DefaultProduceTopic("txn"), kgo.TransactionalID("done"))
	open := newClient(t, p.addr, kgo.DefaultProduceTopic("txn"), kgo.TransactionalID("open"), kgo.TransactionTimeout(time.Minute))
	produce := func(cl *kgo.Client, v string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	begin := func(cl *kgo.Client, v string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(cl, v)
	}
	commit := func(cl *kgo.Client, what string) {
		t.Helper()
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit %s: %v (aborted by the transaction timeout?)", what, err)
		}
	}
	// Two passes of the transaction timeouts (every second) and many of
	// the expiries (every 100 ms).
	check := func(when string, producers int) {
		t.Helper()
		time.Sleep(2500 * time.Millisecond)
		if e := p.expired(t); e.Producers != 0 || e.TransactionalIDs != 0 {
			t.Fatalf("%s: expired %d producers and %d transactional ids; they wrote moments ago", when, e.Producers, e.TransactionalIDs)
		}
		dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"idem": {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		dp.EachProducer(func(kadm.DescribedProducer) { n++ })
		if n != producers {
			t.Fatalf("%s: idem lists %d producers, want %d", when, n, producers)
		}
	}

	produce(idem, "i1")
	begin(done, "d1")
	commit(done, "d1")
	begin(open, "o1")
	p.step(t, time.Hour)
	check("an hour ahead", 1)
	commit(open, "o1")

	// Everything first stamped or stamped again an hour behind.
	p.step(t, -time.Hour)
	produce(idem, "i2")
	produce(late, "l1")
	begin(done, "d2")
	commit(done, "d2")
	begin(open, "o2")
	p.step(t, 0)
	check("back from an hour behind", 2)
	commit(open, "o2")

	got := readCommitted(t, p.addr, "txn")
	for _, v := range []string{"d1", "o1", "d2", "o2"} {
		if got[v] != 1 {
			t.Fatalf("read_committed txn: %v, want d1, o1, d2, o2 once each", got)
		}
	}
}

// TestClockStepOffsetsRetention: with offsets.retention.minutes at 30, the
// committed offsets of groups without members survive a step an hour
// ahead, and offsets committed (and a group first seen) while the clock
// is an hour behind survive its return.
func TestClockStepOffsetsRetention(t *testing.T) {
	p := startClockProc(t, `, "OffsetsRetentionMinutes": 30, "OffsetsRetentionCheckMs": 100`)
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("o"))
	adm := kadm.NewClient(cl)
	createTopics(t, adm, nil, "o")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(group string, at int64) {
		t.Helper()
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "o", Partition: 0, At: at, LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("commit %s: %v", group, err)
		}
	}
	check := func(when string, want map[string]int64) {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // 15 retention passes
		if e := p.expired(t); e.Offsets != 0 || e.Groups != 0 {
			t.Fatalf("%s: offsets retention expired %d offsets and %d groups", when, e.Offsets, e.Groups)
		}
		for g, at := range want {
			resp, err := adm.FetchOffsets(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			if o, ok := resp.Lookup("o", 0); !ok || o.At != at {
				t.Fatalf("%s: group %s has offset %+v (found %v), want %d", when, g, o, ok, at)
			}
		}
	}

	commit("early", 1)
	p.step(t, time.Hour)
	check("an hour ahead", map[string]int64{"early": 1})

	p.step(t, -time.Hour)
	commit("early", 2)
	commit("late", 1)
	p.step(t, 0)
	check("back from an hour behind", map[string]int64{"early": 2, "late": 1})
}

// TestClockStepGroupSessions: a member that heartbeats keeps its session
// through a step an hour ahead and back, and a member that stops
// heartbeating just before the clock is stepped two hours back is still
// removed after its 6 s session, not two hours later.
func TestClockStepGroupSessions(t *testing.T) {
	const session = 6 * time.Second
	p := startClockProc(t, "")
	cl := newClient(t, p.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// join makes a member of group, alone in it, with a classic
	// JoinGroup and SyncGroup.
	type member struct {
		group, id string
		gen       int32
	}
	join := func(group string) member {
		t.Helper()
		meta := kmsg.NewConsumerMemberMetadata()
		meta.Topics = []string{"unused"}
		var id string
		for {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.MemberID, req.ProtocolType = group, id, "consumer"
			req.SessionTimeoutMillis = int32(session.Milliseconds())
			req.RebalanceTimeoutMillis = int32(session.Milliseconds())
			proto := kmsg.NewJoinGroupRequestProtocol()
			proto.Name, proto.Metadata = "range", meta.AppendTo(nil)
			req.Protocols = append(req.Protocols, proto)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if resp.ErrorCode == kerr.MemberIDRequired.Code {
				id = resp.MemberID
				continue
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				t.Fatalf("join %s: %v", group, err)
			}
			sync := kmsg.NewPtrSyncGroupRequest()
			sync.Group, sync.MemberID, sync.Generation = group, resp.MemberID, resp.Generation
			sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
			assignment := kmsg.NewConsumerMemberAssignment()
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = resp.MemberID, assignment.AppendTo(nil)
			sync.GroupAssignment = append(sync.GroupAssignment, a)
			sresp, err := sync.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if err := kerr.ErrorForCode(sresp.ErrorCode); err != nil {
				t.Fatalf("sync %s: %v", group, err)
			}
			return member{group, resp.MemberID, resp.Generation}
		}
	}
	var mu sync.Mutex
	var failures []string
	heartbeat := func(m member) {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = m.group, m.id, m.gen
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s at %s: %v", m.group, time.Now().Format("15:04:05.000"), err))
			mu.Unlock()
		}
	}
	noFailures := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 0 {
			t.Fatalf("%s: heartbeats failed (the session expired?): %v", when, failures)
		}
	}

	alive, dies := join("alive"), join("dies")
	stopDies, stopAll := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		diesBeats, quit := true, stopDies
		for {
			select {
			case <-stopAll:
				return
			case <-quit:
				diesBeats, quit = false, nil
			case <-tick.C:
				heartbeat(alive)
				if diesBeats {
					heartbeat(dies)
				}
			}
		}
	})
	defer func() { close(stopAll); wg.Wait() }()

	p.step(t, time.Hour)
	time.Sleep(3 * time.Second) // 30 session checks
	noFailures("an hour ahead")

	// The last heartbeats come an hour ahead, the session check an hour
	// behind: compared on the wall clock, the session would last 2 h.
	close(stopDies)
	stopped := time.Now()
	p.step(t, -time.Hour)
	adm := kadm.NewClient(cl)
	for {
		dg, err := adm.DescribeGroups(ctx, "dies")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if len(dg["dies"].Members) == 0 {
			// Its last heartbeat was at most 500 ms before it stopped.
			if now.Before(stopped.Add(session - time.Second)) {
				t.Fatalf("the member that stopped heartbeating was removed %v after it stopped; its session is %v", now.Sub(stopped), session)
			}
			t.Logf("removed %v after its heartbeats stopped", now.Sub(stopped).Round(100*time.Millisecond))
			break
		}
		if now.After(stopped.Add(session + 4*time.Second)) {
			t.Fatalf("the member that stopped heartbeating %v ago is still in its group; its session is %v", now.Sub(stopped).Round(time.Millisecond), session)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.step(t, 0)
	time.Sleep(2 * time.Second)
	noFailures("back from an hour behind")
}

// TestClockStepSCRAM: SCRAM logins, and users created while the clock is
// an hour ahead or behind, work through the steps (nothing in SCRAM or the
// login back-off reads the wall clock).
func TestClockStepSCRAM(t *testing.T) {
	p := startClockProc(t, `, "Users": [{"Username": "admin", "Password": "admin-secret"}], "SuperUsers": ["User:admin"]`)
	client := func(user, pass string) *kgo.Client {
		return newClient(t, p.addr, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	login := func(user, pass string) {
		t.Helper()
		cl := client(user, pass)
		defer cl.Close()
		if _, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
			t.Fatalf("log in as %s: %v", user, err)
		}
	}
	adm := kadm.NewClient(client("admin", "admin-secret"))
	create := func(user string) {
		t.Helper()
		resp, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha512, Password: user + "-secret", Iterations: 4096}})
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("create %s: %v", user, err)
		}
	}

	p.step(t, time.Hour)
	login("admin", "admin-secret")
	create("ahead")
	login("ahead", "ahead-secret")
	p.step(t, -time.Hour)
	login("ahead", "ahead-secret")
	create("behind")
	login("behind", "behind-secret")
	p.step(t, 0)
	for _, u := range []string{"admin", "ahead", "behind"} {
		login(u, u+"-secret")
	}
}
