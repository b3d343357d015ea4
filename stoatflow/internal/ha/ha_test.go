package ha

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// sim runs pods over one shared, totally ordered log. Each pod reads the
// log with its own delay, as pods on a real cluster do.
type sim struct {
	t     *testing.T
	rng   *rand.Rand
	now   time.Time
	log   []*Record
	pods  map[string]*simPod
	order []string
	// active[epoch] is every pod that promoted to that epoch.
	active map[int64][]string
}

type simPod struct {
	n       *Node
	read    int // next log index to read
	delay   int // records it lags behind (0: none)
	dead    bool
	lag     int64
	gen     int64
	running bool
	// frozen counts the steps the pod is stalled (it reads, heartbeats
	// and ticks nothing); staleOnce makes its first step after the stall
	// decide on the view it had before it, as a pod does that processes a
	// fetch it received before it stalled.
	frozen    int
	staleOnce bool
}

var incarnations int

func cfg(pod string) Config {
	incarnations++
	return Config{Pod: pod, Incarnation: fmt.Sprint(incarnations), Heartbeat: 100 * time.Millisecond, StalenessMisses: 3, AcceptableRecoveryLag: 100, PromotionGrace: time.Second}
}

func newSim(t *testing.T, seed uint64, pods ...string) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, 9)), now: time.Unix(1000, 0), pods: map[string]*simPod{}, active: map[int64][]string{}}
	for _, p := range pods {
		s.pods[p] = &simPod{n: New(cfg(p))}
		s.order = append(s.order, p)
	}
	return s
}

func (s *sim) publish(v any) {
	k, val := Encode(v)
	r, err := Decode(k, val, int64(len(s.log)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.log = append(s.log, r)
}

func (s *sim) act(id string, a Action) {
	p := s.pods[id]
	if a.Claim != nil {
		s.publish(a.Claim)
	}
	if a.Promote {
		s.active[a.PromoteEpoch] = append(s.active[a.PromoteEpoch], id)
		p.running = true
		p.n.Promoted()
	}
	if a.Demote {
		p.running = false
		p.n.Demoted()
	}
	if a.Handoff {
		s.publish(p.n.HandedOff(a.HandoffTo, a.Force))
	}
}

// step advances 10 ms: every live pod reads what its delay allows,
// heartbeats every 100 ms and ticks.
func (s *sim) step(i int) {
	s.now = s.now.Add(10 * time.Millisecond)
	for _, id := range s.order {
		p := s.pods[id]
		if p.dead {
			continue
		}
		if p.frozen > 0 {
			if p.frozen--; p.frozen == 0 {
				p.staleOnce = true
			}
			continue
		}
		limit := len(s.log) - p.delay
		if p.staleOnce {
			limit, p.staleOnce = p.read, false
		}
		for p.read < limit {
			r := s.log[p.read]
			p.read++
			if r != nil {
				s.act(id, p.n.Observe(r, s.now))
			}
		}
		p.n.SetCaughtUp(p.delay == 0)
		p.n.SetLag(p.lag, 0)
		if i%10 == 0 {
			p.gen++
			s.publish(p.n.Heartbeat(p.gen))
		}
		s.act(id, p.n.Tick(s.now))
	}
}

func (s *sim) run(steps int) {
	for i := 0; i < steps; i++ {
		s.step(i)
	}
}

// check: every epoch promoted at most one pod, and that pod is the first
// claimant of the epoch in the log.
func (s *sim) check() {
	first := map[int64]string{}
	prev := int64(0)
	for _, r := range s.log {
		if r.Claim != nil && r.Claim.Prev == prev && r.Claim.Epoch == prev+1 {
			first[r.Claim.Epoch] = r.Claim.Pod
			prev = r.Claim.Epoch
		}
	}
	for e, ps := range s.active {
		if len(ps) != 1 {
			s.t.Fatalf("epoch %d promoted %v", e, ps)
		}
		if first[e] != ps[0] {
			s.t.Fatalf("epoch %d promoted %s, but the first claim in the log was %s's", e, ps[0], first[e])
		}
	}
}

func (s *sim) runningPods() []string {
	var out []string
	for _, id := range s.order {
		if p := s.pods[id]; !p.dead && p.running {
			out = append(out, id)
		}
	}
	return out
}

func TestFirstStartElectsOne(t *testing.T) {
	s := newSim(t, 1, "pod-0", "pod-1", "pod-2")
	s.run(100)
	s.check()
	if r := s.runningPods(); len(r) != 1 {
		t.Fatalf("running after start: %v", r)
	}
}

func TestFailoverAfterStaleness(t *testing.T) {
	s := newSim(t, 2, "pod-0", "pod-1", "pod-2")
	s.run(100)
	old := s.runningPods()[0]
	s.pods[old].dead = true
	killed := s.now
	for i := 0; i < 200 && len(s.runningPods()) == 0; i++ {
		s.step(i)
	}
	s.check()
	r := s.runningPods()
	if len(r) != 1 || r[0] == old {
		t.Fatalf("after killing %s: running %v", old, r)
	}
	took := s.now.Sub(killed)
	limit := cfg("x").Staleness() + 200*time.Millisecond
	if took > limit {
		t.Fatalf("failover took %v (simulated), more than staleness + two heartbeats (%v)", took, limit)
	}
}

// TestStalledStandbyDoesNotClaim: a standby stalled for longer than
// failure detection while the active goes on, deciding on the view it had
// before the stall, does not take its own silence for the active's: its
// own heartbeats are missing from the log too.
func TestStalledStandbyDoesNotClaim(t *testing.T) {
	s := newSim(t, 5, "pod-0", "pod-1")
	s.run(100)
	act := s.runningPods()[0]
	sb := "pod-0"
	if sb == act {
		sb = "pod-1"
	}
	s.pods[sb].frozen = 60 // 600 ms, twice the staleness
	claims := func() int {
		c := 0
		for _, r := range s.log {
			if r.Claim != nil {
				c++
			}
		}
		return c
	}
	before := claims()
	for i := 0; i < 100; i++ {
		s.step(i)
	}
	s.check()
	if n := claims() - before; n != 0 {
		t.Fatalf("the stalled standby claimed %d times although %s kept heartbeating", n, act)
	}
	if r := s.runningPods(); len(r) != 1 || r[0] != act {
		t.Fatalf("running %v, want %s still", r, act)
	}
}

// TestLeastLagWins: the freshest eligible standby is elected; one beyond
// acceptable-recovery-lag is not.
func TestLeastLagWins(t *testing.T) {
	s := newSim(t, 3, "pod-0", "pod-1", "pod-2")
	s.run(100)
	old := s.runningPods()[0]
	var rest []string
	for _, id := range s.order {
		if id != old {
			rest = append(rest, id)
		}
	}
	s.pods[rest[0]].lag = 50
	s.pods[rest[1]].lag = 5
	s.run(30)
	s.pods[old].dead = true
	s.run(200)
	s.check()
	if r := s.runningPods(); len(r) != 1 || r[0] != rest[1] {
		t.Fatalf("running %v, want the least-behind %s", r, rest[1])
	}
}

// TestNoEligibleWaitsForGrace: with every standby beyond the acceptable
// lag, the least-behind takes over only after promotion-grace-ms.
func TestNoEligibleWaitsForGrace(t *testing.T) {
	s := newSim(t, 4, "pod-0", "pod-1", "pod-2")
	s.run(100)
	old := s.runningPods()[0]
	for _, id := range s.order {
		if id != old {
			s.pods[id].lag = 1000 + int64(len(id))
		}
	}
	s.pods[s.order[(indexOf(s.order, old)+1)%3]].lag = 500
	s.run(30)
	s.pods[old].dead = true
	killed := s.now
	for i := 0; i < 400 && len(s.runningPods()) == 0; i++ {
		s.step(i)
	}
	s.check()
	if s.now.Sub(killed) < cfg("x").PromotionGrace {
		t.Fatalf("promoted %v after the kill, before promotion-grace", s.now.Sub(killed))
	}
	if r := s.runningPods(); len(r) != 1 || s.pods[r[0]].lag != 500 {
		t.Fatalf("running %v, want the least-behind", r)
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// TestSimultaneousClaims: two standbys that cannot see each other both
// claim the same epoch; exactly one promotes, the first in the log, over
// 200 seeded runs.
func TestSimultaneousClaims(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		s := newSim(t, seed, "a", "b")
		// Each claims blind: neither has heard the other.
		ca := &Claim{Pod: "a", Incarnation: s.pods["a"].n.cfg.Incarnation, Epoch: 1, Prev: 0}
		cb := &Claim{Pod: "b", Incarnation: s.pods["b"].n.cfg.Incarnation, Epoch: 1, Prev: 0}
		if s.rng.IntN(2) == 0 {
			s.publish(ca)
			s.publish(cb)
		} else {
			s.publish(cb)
			s.publish(ca)
		}
		s.pods["a"].n.claimedFor, s.pods["b"].n.claimedFor = 1, 1
		s.pods["a"].delay, s.pods["b"].delay = s.rng.IntN(2), s.rng.IntN(2)
		s.run(5)
		s.pods["a"].delay, s.pods["b"].delay = 0, 0
		s.run(50)
		s.check()
		if r := s.runningPods(); len(r) != 1 || r[0] != s.log[0].Claim.Pod {
			t.Fatalf("seed %d: running %v, first claim %s", seed, r, s.log[0].Claim.Pod)
		}
	}
}

// TestStaleTailDefers: a pod whose view of the topic is not current makes
// no claim.
func TestStaleTailDefers(t *testing.T) {
	n := New(cfg("p"))
	n.SetCaughtUp(false)
	if a := n.Tick(time.Unix(5000, 0)); a.Claim != nil {
		t.Fatal("claimed with a stale tail")
	}
	n.SetCaughtUp(true)
	if a := n.Tick(time.Unix(5000, 0)); a.Claim == nil {
		t.Fatal("no claim with a current tail and no active")
	}
}

// TestSwitchHandsOver: a SWITCH makes the active hand off; a standby
// claims at once (no staleness wait) and the old active demotes in place.
func TestSwitchHandsOver(t *testing.T) {
	s := newSim(t, 5, "pod-0", "pod-1")
	s.run(100)
	old := s.runningPods()[0]
	s.log = append(s.log, &Record{Offset: int64(len(s.log)), Command: &Command{Command: CmdSwitch}})
	start := s.now
	for i := 0; i < 100; i++ {
		s.step(i)
		if r := s.runningPods(); len(r) == 1 && r[0] != old {
			break
		}
	}
	s.check()
	if r := s.runningPods(); len(r) != 1 || r[0] == old {
		t.Fatalf("after switch: running %v (old %s)", r, old)
	}
	if d := s.now.Sub(start); d >= cfg("x").Staleness() {
		t.Fatalf("switch took %v, as long as failure detection", d)
	}
	if s.pods[old].n.Role() != RoleStandby {
		t.Fatalf("old active is %s", s.pods[old].n.Role())
	}
}

func TestRandomKillsKeepOneActive(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		s := newSim(t, seed, "p0", "p1", "p2")
		for round := 0; round < 10; round++ {
			s.run(50 + s.rng.IntN(50))
			if r := s.runningPods(); len(r) > 0 && s.rng.IntN(2) == 0 {
				s.pods[r[0]].dead = true
			}
			for _, id := range s.order {
				if p := s.pods[id]; p.dead && s.rng.IntN(3) == 0 {
					// Restart: a fresh node that reads the whole log.
					s.pods[id] = &simPod{n: New(cfg(id))}
				}
				s.pods[id].delay = s.rng.IntN(3)
			}
		}
		for _, id := range s.order {
			s.pods[id].delay = 0
		}
		s.run(300)
		s.check()
		alive := 0
		for _, p := range s.pods {
			if !p.dead {
				alive++
			}
		}
		if r := s.runningPods(); alive > 0 && len(r) != 1 {
			t.Fatalf("seed %d: %d alive, running %v", seed, alive, r)
		}
	}
}
