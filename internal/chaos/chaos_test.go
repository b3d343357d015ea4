package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/checker"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// echoServer answers every line with the same line and counts the
// connections it accepted.
func echoServer(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), &n
}

func newTestProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy("test")
	if err != nil {
		t.Fatal(err)
	}
	p.SetTarget(target)
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and waits at most within for its echo.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, within time.Duration) (string, error) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func TestProxyBlackholeHoldsThenDelivers(t *testing.T) {
	target, _ := echoServer(t)
	p := newTestProxy(t, target)
	c, r := dial(t, p.Addr())
	if got, err := roundTrip(t, c, r, "a", 5*time.Second); err != nil || got != "a" {
		t.Fatalf("pass: %q %v", got, err)
	}
	for _, dir := range [][2]bool{{true, true}, {true, false}, {false, true}} {
		p.Blackhole(dir[0], dir[1])
		if got, err := roundTrip(t, c, r, "b", 300*time.Millisecond); err == nil {
			t.Fatalf("blackhole %v: echo %q came through", dir, got)
		}
		p.Pass()
		// The held bytes arrive once the link heals: nothing was lost.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil || got != "b\n" {
			t.Fatalf("after heal from %v: %q %v", dir, got, err)
		}
	}
}

func TestProxyBlackholeDelaysDial(t *testing.T) {
	target, accepted := echoServer(t)
	p := newTestProxy(t, target)
	p.Blackhole(true, true)
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(t, c, r, "x", 300*time.Millisecond); err == nil {
		t.Fatal("echo through a blackhole")
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("server saw %d connections through a blackhole", n)
	}
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "x\n" {
		t.Fatalf("after heal: %q %v", got, err)
	}
}

func TestProxyDelay(t *testing.T) {
	target, _ := echoServer(t)
	p := newTestProxy(t, target)
	c, r := dial(t, p.Addr())
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(t, c, r, "d", 5*time.Second); err != nil || got != "d" {
		t.Fatalf("%q %v", got, err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("round trip took %v with 100 ms each way", el)
	}
	if p.State() != "delay 100ms" {
		t.Fatalf("state %q", p.State())
	}
}

func TestProxyDropAndReset(t *testing.T) {
	target, _ := echoServer(t)
	p := newTestProxy(t, target)
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(t, c, r, "1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Drop()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after Drop: %v, want EOF", err)
	}
	c2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(t, c2, r2, "2", 5*time.Second); err != nil {
		t.Fatalf("a new connection after Drop: %v", err)
	}
	p.Reset()
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r2.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after Reset: %v, want a connection reset", err)
	}
	if err := testWait(func() bool { return p.Conns() == 0 }); err != nil {
		t.Fatalf("%d connections left open", p.Conns())
	}
}

func testWait(cond func() bool) error {
	for range 100 {
		if cond() {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("timeout")
}

func TestNetPartitionIsolateCut(t *testing.T) {
	n, err := NewNet(3)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	held := func() []string {
		var out []string
		for _, p := range n.proxies {
			if p.State() != "pass" {
				out = append(out, p.Name())
			}
		}
		slices.Sort(out)
		return out
	}
	n.Partition([]int{1}, []int{2, 3})
	if got := held(); !slices.Equal(got, []string{"1->2", "1->3", "2->1", "3->1"}) {
		t.Fatalf("partition {1}|{2,3} holds %v", got)
	}
	n.Heal(false)
	n.Isolate(2)
	if got := held(); !slices.Equal(got, []string{"1->2", "2->1", "2->3", "3->2"}) {
		t.Fatalf("isolating 2 holds %v (its client link must stay open)", got)
	}
	n.Heal(true)
	n.Cut(3, 1)
	if got := held(); !slices.Equal(got, []string{"3->1"}) {
		t.Fatalf("cut 3->1 holds %v", got)
	}
	n.Heal(false)
	if len(held()) != 0 || len(n.ClientAddrs()) != 3 {
		t.Fatalf("after heal: %v", held())
	}
}

func TestPlanIsSeeded(t *testing.T) {
	a := Plan(7, 2*time.Minute, 3, PlanOptions{})
	b := Plan(7, 2*time.Minute, 3, PlanOptions{})
	if !slices.Equal(a, b) {
		t.Fatal("one seed, two schedules")
	}
	if c := Plan(8, 2*time.Minute, 3, PlanOptions{}); slices.Equal(a, c) {
		t.Fatal("two seeds, one schedule")
	}
	// However short the phase, the first cycle has every kind.
	short := Plan(1, time.Second, 3, PlanOptions{})
	var kinds []Kind
	for _, s := range short {
		kinds = append(kinds, s.Kind)
	}
	for _, k := range AllKinds {
		if !slices.Contains(kinds, k) {
			t.Errorf("kind %s missing from %v", k, kinds)
		}
	}
	for i := 1; i < len(a); i++ {
		if a[i].At <= a[i-1].At {
			t.Fatalf("steps out of order: %v then %v", a[i-1], a[i])
		}
	}
	only := Plan(3, time.Minute, 3, PlanOptions{Kinds: []Kind{Pause}, HoldMax: time.Second})
	for _, s := range only {
		if s.Kind != Pause || s.Hold > time.Second {
			t.Fatalf("restricted plan has %v", s)
		}
	}
}

func TestParseKinds(t *testing.T) {
	if ks, err := ParseKinds("all"); err != nil || !slices.Equal(ks, append(slices.Clone(AllKinds), ClusterKinds...)) {
		t.Fatalf("all: %v %v", ks, err)
	}
	if ks, err := ParseKinds("kill, pause"); err != nil || !slices.Equal(ks, []Kind{Kill, Pause}) {
		t.Fatalf("list: %v %v", ks, err)
	}
	ks, err := ParseKinds("-kill-all,-bit-flip")
	if err != nil || slices.Contains(ks, KillAll) || slices.Contains(ks, BitFlip) || len(ks) != len(AllKinds)+len(ClusterKinds)-2 {
		t.Fatalf("exclusions: %v %v", ks, err)
	}
	for _, bad := range []string{"nap", "kill,-pause"} {
		if _, err := ParseKinds(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFailovers(t *testing.T) {
	s := func(sec float64, leader int, epoch int32) sample {
		return sample{At: time.Duration(sec * float64(time.Second)), Leader: leader, Epoch: epoch}
	}
	samples := []sample{s(1, 1, 3), s(2, 1, 3), s(3, 0, 0), s(3.5, 0, 0), s(4, 2, 4), s(10, 2, 4), s(11, 2, 5)}
	events := []Event{{Kind: Kill, Targets: []int{1}, Start: 2500 * time.Millisecond, End: 3 * time.Second}}
	fs := failovers(samples, events)
	if len(fs) != 2 {
		t.Fatalf("failovers %+v", fs)
	}
	f := fs[0]
	if f.From != 1 || f.To != 2 || f.Leaderless != 2*time.Second || f.SinceFault != 1500*time.Millisecond || !strings.HasPrefix(f.Cause, "kill [1]") {
		t.Fatalf("first failover %+v", f)
	}
	if fs[1].Cause != "" || fs[1].FromEpoch != 4 || fs[1].ToEpoch != 5 {
		t.Fatalf("second failover (no fault) %+v", fs[1])
	}
}

func TestDecodeWithControl(t *testing.T) {
	data, err := recordbatch.Encode(recordbatch.BatchOptions{BaseOffset: 0, ProducerID: -1}, []recordbatch.Record{{Value: []byte("a")}, {Value: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := recordbatch.Encode(recordbatch.BatchOptions{BaseOffset: 2, ProducerID: 5, Control: true, Transactional: true},
		[]recordbatch.Record{{Key: []byte{0, 0, 0, 1}, Value: []byte{0, 0, 0, 0, 0, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	recs, eps, err := decodeWithControl(append(data, ctl...))
	if err != nil {
		t.Fatal(err)
	}
	want := []checker.Record{{Offset: 0, Value: "a"}, {Offset: 1, Value: "b"}, {Offset: 2, Value: "\x00\x00\x00\x00\x00\x00", Control: true}}
	if !slices.Equal(recs, want) {
		t.Fatalf("decoded %+v", recs)
	}
	if len(eps) != 3 {
		t.Fatalf("epochs %v", eps)
	}
	if recs, _, err := decodeWithControl(nil); err != nil || recs != nil {
		t.Fatalf("empty log: %v %v", recs, err)
	}
}

func TestRenderHTML(t *testing.T) {
	h := checker.History{
		Sends: []checker.Send{
			{Producer: "p1", Seq: 0, Topic: "chaos", Partition: 0, Value: "p1-0", Start: 1e8, End: 2e8, Outcome: checker.Acked, Offset: 0},
			{Producer: "p1", Seq: 1, Topic: "chaos", Partition: 0, Value: "p1-1", Start: 3e8, End: 4e9, Outcome: checker.Unknown},
		},
		Polls: []checker.Poll{{Consumer: "c", Topic: "chaos", Partition: 0, Records: []checker.Record{{Offset: 0, Value: "<evil>"}}, HW: 1, Start: 5e8, End: 6e8}},
	}
	res := &Result{Config: Config{Seed: 42, Replicas: 3}, History: h, Report: checker.Check(h, checker.Options{}),
		Events:    []Event{{Kind: Pause, Targets: []int{2}, Start: time.Second, End: 3 * time.Second, Detail: "SIGSTOP"}},
		Failovers: []Failover{{At: 2 * time.Second, From: 1, To: 2, FromEpoch: 3, ToEpoch: 4, Leaderless: time.Second}},
		samples:   []sample{{At: 0, Leader: 1, Epoch: 3}, {At: 2 * time.Second, Leader: 2, Epoch: 4}},
		Took:      5 * time.Second}
	page := RenderHTML(res)
	if res.Report.OK() {
		t.Fatal("the history should have an unexpected value")
	}
	for _, want := range []string{"<svg", "seed 42", "pause", string(checker.Unexpected), "&lt;evil&gt;", "Failovers"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "<evil>"} {
		if strings.Contains(page, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
}

func TestCheckEpochs(t *testing.T) {
	h := checker.History{
		Polls: []checker.Poll{
			{Consumer: "c", Topic: "t", Partition: 0, HW: 3, Records: []checker.Record{{Offset: 1, Value: "a"}, {Offset: 2, Value: "b"}}},
			{Consumer: "c", Topic: "t", Partition: 0, HW: 3, Records: []checker.Record{{Offset: 2, Value: "b"}}},
		},
		Dumps: []checker.Dump{
			{Replica: "1", Topic: "t", Partition: 0, Leader: true, Records: []checker.Record{{Offset: 1, Value: "a"}, {Offset: 2, Value: "b"}}},
			{Replica: "2", Topic: "t", Partition: 0, Records: []checker.Record{{Offset: 1, Value: "a"}, {Offset: 2, Value: "b"}}},
		},
	}
	// The first poll read offset 2 in epoch 5; the final leader has it in
	// epoch 6. Dump 2 is not the leader's and is not judged.
	out, n := checkEpochs(h, [][]int32{{5, 5}, {6}}, [][]int32{{5, 6}, {5, 5}}, 10)
	if n != 1 || len(out) != 1 || out[0].Offset != 2 || out[0].Kind != RewrittenRead || !strings.Contains(out[0].Witness[0], "below the high watermark") {
		t.Fatalf("got %d %+v", n, out)
	}
	if _, n := checkEpochs(h, [][]int32{{5, 6}, {6}}, [][]int32{{5, 6}, {5, 5}}, 10); n != 0 {
		t.Fatalf("matching epochs reported %d", n)
	}
}

func TestKnownFalseTruncation(t *testing.T) {
	// Consumer c read offsets 5 and 6, was told 5..7 were lost, rewound
	// and read 5 and 6 again: the final log has both, same epochs.
	h := checker.History{
		Polls: []checker.Poll{
			{Consumer: "c", Topic: "t", Partition: 0, HW: 7, Start: 1, End: 2, Records: []checker.Record{{Offset: 5, Value: "a"}, {Offset: 6, Value: "b"}}},
			{Consumer: "c", Topic: "t", Partition: 0, HW: 8, Start: 5, End: 6, Records: []checker.Record{{Offset: 5, Value: "a"}, {Offset: 6, Value: "b"}}},
		},
		Dumps: []checker.Dump{{Replica: "1", Topic: "t", Partition: 0, Leader: true, HW: 7,
			Records: []checker.Record{{Offset: 5, Value: "a"}, {Offset: 6, Value: "b"}}}},
		Sends: []checker.Send{
			{Producer: "p", Seq: 0, Topic: "t", Partition: 0, Value: "a", Outcome: checker.Acked, Offset: 5},
			{Producer: "p", Seq: 1, Topic: "t", Partition: 0, Value: "b", Outcome: checker.Acked, Offset: 6},
		},
	}
	rep := checker.Check(h, checker.Options{MaxPerKind: -1})
	if !rep.Has(checker.NonMonotonicPoll) {
		t.Fatalf("the rewind is not reported: %v", rep)
	}
	notice := lossNotice{At: 3, Consumer: "c", Topic: "t", Partition: 0, ConsumedTo: 7, ResetTo: 5, Text: "notice"}
	pe, de := [][]int32{{4, 4}, {4, 4}}, [][]int32{{4, 4}}
	falseOnes := falseNotices(h, pe, de, []lossNotice{notice})
	if len(falseOnes) != 1 {
		t.Fatalf("false notices %v", falseOnes)
	}
	kept, known := splitKnown(rep, falseOnes)
	if !kept.OK() || len(known) != 1 || !strings.Contains(known[0].Witness[len(known[0].Witness)-1], FalseTruncation.ID) {
		t.Fatalf("kept %v, known %+v", kept, known)
	}
	// The same notice is genuine when the record read at 6 was of another
	// epoch than the final one: nothing is set apart.
	if got := falseNotices(h, [][]int32{{4, 3}, {4, 4}}, de, []lossNotice{notice}); len(got) != 0 {
		t.Fatalf("a genuine truncation taken for a false one: %v", got)
	}
	if kept, known := splitKnown(rep, nil); kept.OK() || len(known) != 0 {
		t.Fatal("anomalies set apart without a notice")
	}
}

func TestDecideKeepsBothModes(t *testing.T) {
	in := newInjector(1)
	in.lossyP, in.replicas = 0.5, 3
	for range 200 {
		for id := 1; id <= 3; id++ {
			in.decide(id)
		}
		n := 0
		for _, l := range in.lossy {
			if l {
				n++
			}
		}
		if n == 0 || n == 3 {
			t.Fatalf("every replica in one mode: %v", in.lossy)
		}
	}
	// In a cluster, each group keeps both modes.
	in = newInjector(2)
	in.lossyP, in.replicas = 0.5, 3
	in.groupOf = map[int]int{1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1}
	for range 200 {
		for id := 1; id <= 6; id++ {
			in.decide(id)
		}
		for g := range 2 {
			n := 0
			for id := 3*g + 1; id <= 3*g+3; id++ {
				if in.lossy[id] {
					n++
				}
			}
			if n == 0 || n == 3 {
				t.Fatalf("every replica of g%d in one mode: %v", g+1, in.lossy)
			}
		}
	}
	in.forceEnv = "broken-fsync"
	in.decide(1)
	if !in.isLossy(1) || len(in.env(1)) != 1 {
		t.Fatal("a forced environment is not applied")
	}
}
