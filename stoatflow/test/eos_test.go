package test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/stoatflow/internal/crashpoint"
	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// killLoop starts the application kills times while input keeps coming,
// each time letting it die at a crash point of the commit protocol (or be
// killed with SIGKILL after a random time), then runs it once more to the
// end and checks exactly-once.
func killLoop(t *testing.T, bootstrap string, kills int, seed uint64) {
	w := newWordcount(t, bootstrap,
		// Frequent checkpoints, so that dying mid-checkpoint is reached.
		"STOATFLOW__STATE__SEGMENT_CHECKPOINT_RECORDS=150")
	in := w.instance()
	in.start()
	waitTopic(t, bootstrap, "words")
	f := startFeeder(t, bootstrap, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	byPoint := map[string]int{}
	points := append(append([]string{}, crashpoint.All...), "timer")
	for i := 0; i < kills; i++ {
		if in.proc != nil && !in.proc.Exited() {
			in.proc.Kill()
		}
		point := points[rng.IntN(len(points))]
		var p *testenv.Process
		if point == "timer" {
			p = in.start()
			time.Sleep(time.Duration(100+rng.IntN(1500)) * time.Millisecond)
		} else {
			p = in.start("STOATFLOW_CRASHPOINT=" + point + "@" + string(rune('1'+rng.IntN(3))))
			// A point that is not reached in time (mid-restore with
			// nothing to restore) ends with a timed kill.
			p.Wait(3 * time.Second)
			if p.Exited() && !strings.Contains(p.Log(), "crashpoint "+point) {
				t.Fatalf("kill %d: the application exited before reaching %s:\n%s", i, point, tail(p.Log(), 30))
			}
			if !p.Exited() {
				point += " (not reached)"
			}
		}
		byPoint[point]++
		p.Kill()
	}
	sent := f.stopFeeding()
	t.Logf("%d kills: %v; %d lines acknowledged during them", kills, byPoint, sent)
	in.start()
	want, lines := expectedCounts(t, bootstrap)
	if lines == 0 {
		t.Fatal("no input was written")
	}
	in.waitCounts(want, 90*time.Second)
	if !in.proc.Stop(30 * time.Second) {
		t.Fatalf("the application did not stop on SIGTERM:\n%s", tail(in.proc.Log(), 20))
	}
	if !strings.Contains(in.proc.Log(), "stoatflow stopped cleanly") {
		t.Errorf("no clean stop logged:\n%s", tail(in.proc.Log(), 20))
	}
	checkExactlyOnce(t, bootstrap, w.app, want)
}

// TestWordcountKillNine is the exactly-once proof on MoonMQ: at least 50
// kills at every step of the commit protocol.
func TestWordcountKillNine(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	killLoop(t, c.Bootstrap(), 52, 1)
}

// TestWordcountApacheKafka runs the same proof on Apache Kafka 4.x: the
// library needs nothing of MoonMQ's.
func TestWordcountApacheKafka(t *testing.T) {
	k := testenv.ApacheKafka(t)
	killLoop(t, k.Bootstrap(), 12, 2)
}

// TestWordcountBrokerFailover kills the replication group's leader twice
// while the application runs: the output stays exactly-once.
func TestWordcountBrokerFailover(t *testing.T) {
	c := testenv.MoonMQ(t, 3)
	w := newWordcount(t, c.Bootstrap())
	in := w.instance()
	in.start()
	waitTopic(t, c.Bootstrap(), "words")
	f := startFeeder(t, c.Bootstrap(), 3)
	for round := 0; round < 2; round++ {
		time.Sleep(3 * time.Second)
		leader := c.Leader(20 * time.Second)
		c.Kill(leader)
		t.Logf("killed leader replica %d", leader)
		next := c.Leader(30 * time.Second)
		t.Logf("replica %d leads", next)
		time.Sleep(2 * time.Second)
		c.Start(leader)
		c.WaitHealthy(60 * time.Second)
	}
	time.Sleep(2 * time.Second)
	sent := f.stopFeeding()
	if in.proc.Exited() {
		t.Fatalf("the application died in the failover:\n%s", tail(in.proc.Log(), 40))
	}
	want, lines := expectedCounts(t, c.Bootstrap())
	t.Logf("%d lines in the input (%d acknowledged to the feeder)", lines, sent)
	in.waitCounts(want, 90*time.Second)
	in.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// TestWordcountZombie stops the active instance with SIGSTOP, starts a
// second one (which fences the first), then resumes the first: the first
// must not commit and must stop by itself.
func TestWordcountZombie(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w := newWordcount(t, c.Bootstrap())
	a, b := w.instance(), w.instance()
	a.start()
	waitTopic(t, c.Bootstrap(), "words")
	feed := client(t, c.Bootstrap())
	rng := rand.New(rand.NewPCG(4, 4))
	produceLines(t, feed, rng, 200)
	want, _ := expectedCounts(t, c.Bootstrap())
	a.waitCounts(want, 60*time.Second)

	a.proc.Pause()
	produceLines(t, feed, rng, 200) // a is frozen with this unprocessed
	b.start()
	want, _ = expectedCounts(t, c.Bootstrap())
	b.waitCounts(want, 60*time.Second)

	a.proc.Resume()
	produceLines(t, feed, rng, 200) // both read it; only b may commit
	exited, werr := a.proc.Wait(30 * time.Second)
	if !exited {
		t.Fatalf("the fenced instance kept running after SIGCONT:\n%s", tail(a.proc.Log(), 30))
	}
	if !strings.Contains(a.proc.Log(), "fenced") {
		t.Errorf("the stopped instance did not say it was fenced:\n%s", tail(a.proc.Log(), 20))
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 3 {
		t.Errorf("fenced instance ended with %v, want exit status 3 (ErrFenced)", werr)
	}
	want, _ = expectedCounts(t, c.Bootstrap())
	b.waitCounts(want, 60*time.Second)
	b.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// TestCheckpointBoundsReplay kills the application after many updates: the
// restart replays at most about one checkpoint interval of the changelog,
// not the whole of it.
func TestCheckpointBoundsReplay(t *testing.T) {
	const every = 300
	c := testenv.MoonMQ(t, 1)
	w := newWordcount(t, c.Bootstrap(), "STOATFLOW__STATE__SEGMENT_CHECKPOINT_RECORDS=300")
	in := w.instance()
	in.start()
	waitTopic(t, c.Bootstrap(), "words")
	feed := client(t, c.Bootstrap())
	rng := rand.New(rand.NewPCG(5, 5))
	// Many distinct words in small batches: many changelog records, few
	// per commit.
	for i := 0; i < 60; i++ {
		recs := 20
		produceLinesWith(t, feed, rng, recs, func(r *rand.Rand) string {
			return "u" + string(rune('a'+r.IntN(26))) + string(rune('a'+r.IntN(26))) + string(rune('a'+r.IntN(26)))
		})
		time.Sleep(30 * time.Millisecond)
	}
	want, _ := expectedCounts(t, c.Bootstrap())
	in.waitCounts(want, 60*time.Second)
	changelog := len(readAll(t, c.Bootstrap(), w.app+"-counts-changelog"))
	in.proc.Kill()
	in.start()
	in.waitCounts(want, 60*time.Second)
	n := replayed(in.proc.Log())
	t.Logf("changelog holds %d records; the restart replayed %d (checkpoint every %d)", changelog, n, every)
	if changelog < 3*every {
		t.Fatalf("the test wrote only %d changelog records; it needs several checkpoint intervals", changelog)
	}
	// One interval, plus the commit that crossed it.
	if n > every+200 {
		t.Errorf("the restart replayed %d changelog records, more than one checkpoint interval (%d) and a commit", n, every)
	}
	in.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// produceLinesWith sends n lines of one to three words made by word.
func produceLinesWith(t *testing.T, cl *kgo.Client, rng *rand.Rand, n int, word func(*rand.Rand) string) {
	t.Helper()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		ws := make([]string, 1+rng.IntN(3))
		for j := range ws {
			ws[j] = word(rng)
		}
		recs = append(recs, &kgo.Record{Topic: "words", Value: []byte(strings.Join(ws, " "))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}
}

// TestWordcountSASL runs the example against a broker that requires SCRAM
// logins, configured from the environment alone.
func TestWordcountSASL(t *testing.T) {
	c := testenv.MoonMQSASL(t, "stoat", "s3cret")
	w := newWordcount(t, c.Bootstrap(), "STOATFLOW__SASL__MECHANISM=SCRAM-SHA-512", "STOATFLOW__SASL__USERNAME=stoat", "STOATFLOW__SASL__PASSWORD=s3cret")
	in := w.instance()
	in.start()
	login := kgo.SASL(scram.Auth{User: "stoat", Pass: "s3cret"}.AsSha512Mechanism())
	waitTopic(t, c.Bootstrap(), "words", login)
	produceLines(t, client(t, c.Bootstrap(), login), rand.New(rand.NewPCG(6, 6)), 100)
	want, _ := expectedCounts(t, c.Bootstrap(), login)
	in.waitCounts(want, 60*time.Second)
	in.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want, login)

	// Without a password it is refused, and says so.
	bad := newWordcount(t, c.Bootstrap(), "STOATFLOW__SASL__MECHANISM=SCRAM-SHA-512", "STOATFLOW__SASL__USERNAME=stoat", "STOATFLOW__SASL__PASSWORD=wrong")
	p := bad.instance().start()
	if exited, _ := p.Wait(60 * time.Second); !exited {
		t.Fatal("a wrong password did not stop the application")
	}
	if !strings.Contains(strings.ToLower(p.Log()), "sasl") {
		t.Errorf("a wrong password's error does not mention SASL:\n%s", tail(p.Log(), 10))
	}
}

// TestWordcountAborts makes every fifth commit fail after everything was
// produced: the transaction is aborted, the buffered store writes are
// dropped, and processing resumes from the last commit. Local state must
// never get ahead of what Kafka committed.
func TestWordcountAborts(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w := newWordcount(t, c.Bootstrap(), "STOATFLOW_FAILPOINT=before-commit@5")
	in := w.instance()
	in.start()
	waitTopic(t, c.Bootstrap(), "words")
	f := startFeeder(t, c.Bootstrap(), 8)
	time.Sleep(8 * time.Second)
	f.stopFeeding()
	want, _ := expectedCounts(t, c.Bootstrap())
	in.waitCounts(want, 60*time.Second)
	aborts := strings.Count(in.proc.Log(), "commit failed; aborting")
	if aborts < 5 {
		t.Fatalf("only %d aborted commits; the test needs several", aborts)
	}
	t.Logf("%d commits aborted", aborts)
	in.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}
