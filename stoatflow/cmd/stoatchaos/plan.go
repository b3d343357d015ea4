package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/crashpoint"
)

// Kind names a fault.
type Kind string

// The faults. "The active" is the pod that processes: with --pods 1 the
// one running instance.
const (
	// KillActive: SIGKILL of the active; a standby takes over (with
	// --pods 1 the instance restarts and recovers); the killed pod is
	// started again.
	KillActive Kind = "kill-active"
	// KillStandby: SIGKILL of a standby, started again.
	KillStandby Kind = "kill-standby"
	// PauseActive: SIGSTOP of the active for longer than failure
	// detection, then SIGCONT. A standby must take over and the resumed
	// pod rebuild as a standby in place. With --pods 1: a replacement
	// starts from a second state directory while the instance is frozen
	// (it fences it), and the resumed zombie must exit with status 3.
	PauseActive Kind = "pause-active"
	// CutActive: the network between the active and the broker stalls
	// (every pod dials the broker through its own proxy), while the
	// standbys still reach it; healed after the hold. A standby must take
	// over, and the healed pod find itself fenced and rebuild as a
	// standby in place.
	CutActive Kind = "cut-active"
	// Switch: POST /ha/switch to the active; a caught-up standby takes
	// over and the old active becomes a standby in the same process.
	Switch Kind = "switch"
	// Restart: SIGTERM of a random pod (it must stop within 30 s with
	// status 0), started again.
	Restart Kind = "restart"
	// KillBrokerLeader: SIGKILL of the replication group's serving leader
	// (--replicas 3), restarted after a hold and waited for until it is
	// back in the ISR.
	KillBrokerLeader Kind = "kill-broker-leader"
	// CrashPoint: the application killing itself at a step of the commit
	// protocol (STOATFLOW_CRASHPOINT=<point>@<n>). With pods in
	// active-standby a standby is restarted armed and promoted
	// (POST /ha/promote); with --pods 1 the instance is restarted armed.
	CrashPoint Kind = "crashpoint"
)

// AllKinds lists every fault kind.
var AllKinds = []Kind{KillActive, KillStandby, PauseActive, CutActive, Switch, Restart, KillBrokerLeader, CrashPoint}

// applicable reports why kind cannot run with pods and replicas, or "".
func applicable(k Kind, pods, replicas int) string {
	switch k {
	case KillStandby, Switch, CutActive:
		if pods < 2 {
			return "needs --pods 2 or more (a standby)"
		}
	case KillBrokerLeader:
		if replicas < 3 {
			return "needs --replicas 3 (a replication group)"
		}
	}
	return ""
}

// parseKinds parses --faults: "all" (or "") is every kind that applies,
// "a,b" those kinds, "-a,-b" every kind that applies but those.
func parseKinds(s string, pods, replicas int) ([]Kind, error) {
	s = strings.TrimSpace(s)
	known := map[Kind]bool{}
	for _, k := range AllKinds {
		known[k] = true
	}
	var in, out []Kind
	if s != "" && s != "all" {
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimSpace(f)
			neg := strings.HasPrefix(f, "-")
			k := Kind(strings.TrimPrefix(f, "-"))
			if !known[k] {
				return nil, fmt.Errorf("unknown fault %q (known: %s)", k, kindList(AllKinds))
			}
			if neg {
				out = append(out, k)
			} else {
				in = append(in, k)
			}
		}
	}
	if len(in) > 0 && len(out) > 0 {
		return nil, fmt.Errorf("--faults %q: either list faults or exclude them, not both", s)
	}
	if len(in) > 0 {
		for _, k := range in {
			if why := applicable(k, pods, replicas); why != "" {
				return nil, fmt.Errorf("fault %s %s", k, why)
			}
		}
		return dedupe(in), nil
	}
	var res []Kind
	for _, k := range AllKinds {
		excluded := false
		for _, o := range out {
			excluded = excluded || o == k
		}
		if !excluded && applicable(k, pods, replicas) == "" {
			res = append(res, k)
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("--faults %q leaves no fault", s)
	}
	return res, nil
}

func dedupe(ks []Kind) []Kind {
	seen := map[Kind]bool{}
	var out []Kind
	for _, k := range ks {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func kindList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Step is one fault of the schedule and every random choice it makes.
// Which pod is the active when it runs is not in it: that is timing.
type Step struct {
	Kind Kind
	// Gap is the time the feeder runs undisturbed before the fault.
	Gap time.Duration
	// Pick chooses the target among the candidates (a standby, a pod),
	// in [0, 1).
	Pick float64
	// Hold is how long a pause lasts, or a killed broker stays down.
	Hold time.Duration
	// Point and Nth arm the crash point: Point's Nth arrival.
	Point string
	Nth   int
}

func (s Step) String() string {
	d := fmt.Sprintf("%s gap=%v pick=%.2f", s.Kind, s.Gap, s.Pick)
	switch s.Kind {
	case PauseActive, CutActive, KillBrokerLeader:
		d += fmt.Sprintf(" hold=%v", s.Hold)
	case CrashPoint:
		d += fmt.Sprintf(" point=%s@%d", s.Point, s.Nth)
	}
	return d
}

// pick chooses one of n candidates.
func (s Step) pick(n int) int { return min(int(s.Pick*float64(n)), n-1) }

// plan returns the schedule of seed over kinds, one step per call: first
// one step of every kind in a seeded order, then kinds drawn at random.
// Every step draws the same numbers whatever its kind, so the schedule is
// a function of the seed and the kinds alone (TestPlanIsSeeded).
func plan(seed uint64, kinds []Kind) func() Step {
	rng := rand.New(rand.NewPCG(seed, 0x5704c4a05))
	first := rng.Perm(len(kinds))
	n := 0
	return func() Step {
		var s Step
		if n < len(first) {
			s.Kind = kinds[first[n]]
		} else {
			s.Kind = kinds[rng.IntN(len(kinds))]
		}
		n++
		s.Gap = time.Duration(500+rng.IntN(2000)) * time.Millisecond
		s.Pick = rng.Float64()
		// Failure detection is 4 x 200 ms by default: a pause holds well
		// past it.
		s.Hold = time.Duration(1500+rng.IntN(2500)) * time.Millisecond
		s.Point = crashpoint.All[rng.IntN(len(crashpoint.All))]
		s.Nth = 1 + rng.IntN(3)
		return s
	}
}
