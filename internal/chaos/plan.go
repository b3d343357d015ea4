package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind names a fault.
type Kind string

// The faults the harness injects.
const (
	// Kill: SIGKILL a replica, restart it on its data after a while. The
	// process's unsynced writes survive in the page cache unless it runs
	// in the lossy storage mode (then it is a PowerLoss).
	Kill Kind = "kill"
	// PowerLoss: SIGKILL a replica running in the lossy storage mode, so
	// everything it had not fsynced is gone; restart it later.
	PowerLoss Kind = "power-loss"
	// Pause: SIGSTOP a replica, SIGCONT it later.
	Pause Kind = "pause"
	// IsolateLeader: blackhole every replication link of the serving
	// leader both ways while its clients still reach it.
	IsolateLeader Kind = "isolate-leader"
	// Partition: split the group in two sides whose replication links are
	// blackholed both ways; sometimes the minority's clients are cut too.
	Partition Kind = "partition"
	// OneWay: one replica cannot reach one peer (or any peer) while they
	// still reach it.
	OneWay Kind = "one-way"
	// Delay: add latency to every replication link of a replica.
	Delay Kind = "delay"
	// Drop: close (FIN) or reset (RST) every connection of a replica's
	// links, a few times.
	Drop Kind = "drop"
	// RollingRestart: stop (SIGTERM) and start every replica in turn,
	// waiting for each to rejoin the ISR.
	RollingRestart Kind = "rolling-restart"
	// KillAll: SIGKILL every replica at once and restart them all (a
	// power cut of the whole group for those in the lossy mode).
	KillAll Kind = "kill-all"
	// RestartAll: stop (SIGTERM) every replica at once and start them all
	// again, as an operator restarting the whole group.
	RestartAll Kind = "restart-all"
	// DamageRolled: stop a replica, flip bits in or cut bytes off the end
	// of one of its older (rolled) segment files, start it again. Start-up
	// recovery scans only the newest segment.
	DamageRolled Kind = "damage-rolled"
	// CorruptElect is a scripted scenario: a follower is stopped cleanly
	// (so it restarts "clean"), the tails of its newest data segments are
	// cut off (acknowledged records gone), it is started again and the
	// leader is killed at once, while the other followers cannot reach
	// anybody (they can vote but not campaign). Whether the damaged
	// replica may lead is the question: it must not serve without the
	// records it lost.
	CorruptElect Kind = "corrupt-elect"
	// BitFlip: stop a replica, flip bits in one of its segment files,
	// start it again.
	BitFlip Kind = "bit-flip"
	// Truncate: stop a replica, cut bytes off one of its segment files,
	// start it again.
	Truncate Kind = "truncate"
	// ClockStep: step a replica's wall clock an hour ahead, then an hour
	// behind, then back, while it runs (clock.OffsetFileEnv). Nothing of
	// the replication or the workload may notice: retention, expiry and
	// timeouts keep to broker time, Raft and the ISR to the monotonic
	// clock.
	ClockStep Kind = "clock-step"
	// DiskFull: a replica's writes fail with ENOSPC and its statfs says
	// no space is free, for a while (diskhealth.FaultsFileEnv). A leader
	// hands leadership off, a follower fetches positions only and leaves
	// the ISR; both resume by themselves.
	DiskFull Kind = "disk-full"
	// DiskStall: every fsync of a replica takes 1-4 s longer for a
	// while. Over Server.FsyncStallMs a leader hands leadership off; a
	// slow follower leaves the ISR after its lag time.
	DiskStall Kind = "disk-stall"
	// FsyncEIO: a replica's fsyncs fail with EIO: it must stop (exit 74,
	// naming the file), and the others go on; it is started again on a
	// healthy disk.
	FsyncEIO Kind = "fsync-eio"
	// MetaIsolate (a cluster of groups only): every link between the
	// metadata log's leader and the other voters blackholed both ways.
	// The groups go on serving produce, fetch and their own failovers;
	// only what needs the metadata log (admin changes, new producer-id
	// blocks) waits for the new metadata leader.
	MetaIsolate Kind = "meta-isolate"
	// GroupLinkCut (a cluster of groups only): other groups' brokers
	// cannot reach one group's brokers (the replication addresses they
	// registered), or, in a third of the steps, no group reaches another.
	// Transaction markers and offset commits of transactions between
	// groups wait and retry; nothing else crosses.
	GroupLinkCut Kind = "group-link"
	// Move (a cluster of groups only): move a partition of the data topic
	// from the step's group to another, under the workload, and at the
	// step's pick kill the target's or the source's leader mid-move, or
	// pause the source's leader past the cut-over (a zombie old owner).
	Move Kind = "move"
)

// ClusterKinds are the faults only a cluster of groups has. "all" (and
// the default of a run of several groups) adds them to AllKinds; a run of
// one group leaves them out.
var ClusterKinds = []Kind{MetaIsolate, GroupLinkCut, Move}

// everyKind is AllKinds and ClusterKinds.
func everyKind() []Kind { return append(slices.Clone(AllKinds), ClusterKinds...) }

// AllKinds lists every fault kind.
var AllKinds = []Kind{Kill, PowerLoss, Pause, IsolateLeader, Partition, OneWay, Delay, Drop,
	RollingRestart, KillAll, RestartAll, BitFlip, Truncate, DamageRolled, CorruptElect, ClockStep,
	DiskFull, DiskStall, FsyncEIO}

// ParseKinds parses a comma-separated list of kinds ("" or "all" is
// every kind, the cluster's included); a leading "-" on every entry
// excludes those from every kind.
func ParseKinds(s string) ([]Kind, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return everyKind(), nil
	}
	known := map[Kind]bool{}
	for _, k := range everyKind() {
		known[k] = true
	}
	var in, out []Kind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		neg := strings.HasPrefix(f, "-")
		k := Kind(strings.TrimPrefix(f, "-"))
		if !known[k] {
			return nil, fmt.Errorf("unknown fault kind %q (known: %v)", k, everyKind())
		}
		if neg {
			out = append(out, k)
		} else {
			in = append(in, k)
		}
	}
	if len(in) > 0 && len(out) > 0 {
		return nil, fmt.Errorf("fault kinds %q: either list kinds or exclude them, not both", s)
	}
	if len(in) > 0 {
		return in, nil
	}
	var res []Kind
	for _, k := range everyKind() {
		excluded := false
		for _, o := range out {
			excluded = excluded || o == k
		}
		if !excluded {
			res = append(res, k)
		}
	}
	return res, nil
}

// Role chooses a fault's target by what the replica is when the fault
// starts.
type Role int

const (
	// OnLeader targets the serving leader (any replica if none serves).
	OnLeader Role = iota
	// OnFollower targets a replica that is not the serving leader.
	OnFollower
)

// String names the role.
func (r Role) String() string {
	if r == OnLeader {
		return "leader"
	}
	return "follower"
}

// Step is one planned fault. Everything random about it is fixed here
// or derived from Pick, so one seed always gives the same schedule; which
// replica is "the leader" when it runs is up to the group.
type Step struct {
	// At is the earliest start, from the start of the fault phase; a
	// step starts later if the one before it is still running.
	At   time.Duration
	Kind Kind
	Role Role
	// Hold is how long the fault lasts before it is undone (for Drop, the
	// time over which connections are cut; for RollingRestart, the pause
	// between stop and start).
	Hold time.Duration
	// Pick seeds the choices made when the step runs (which follower,
	// which bytes, which side, ...).
	Pick uint64
	// ResetOnHeal ends a network fault by resetting every connection
	// instead of letting the held bytes flow on.
	ResetOnHeal bool
	// Group is the replication group the step hits in a cluster of
	// groups, 1 for g1 (0 in a run of one group): its roles, sides and
	// "every replica" are that group's.
	Group int
}

// String describes the step for logs and the report.
func (s Step) String() string {
	h := ""
	if s.ResetOnHeal {
		h = ", heal with RST"
	}
	g := ""
	if s.Group > 0 {
		g = fmt.Sprintf(" of g%d", s.Group)
	}
	return fmt.Sprintf("+%v %s on the %s%s for %v%s", s.At.Round(100*time.Millisecond), s.Kind, s.Role, g, s.Hold.Round(100*time.Millisecond), h)
}

// PlanOptions shape a generated schedule.
type PlanOptions struct {
	// Kinds are the faults to draw from (AllKinds if empty). The first
	// steps run each kind once, in a seeded order, so that a short run
	// still injects every kind.
	Kinds []Kind
	// Gap bounds the quiet time between one step's end and the next
	// step's start (default 1-3 s).
	GapMin, GapMax time.Duration
	// HoldMax caps every hold (default 8 s).
	HoldMax time.Duration
	// Groups is the number of replication groups (cluster mode) each
	// step picks one of; 0 or 1 for one group.
	Groups int
}

// expected is roughly how long a step takes beyond its hold (stops,
// starts, elections), so the planned times stay near the real ones.
func expected(k Kind, replicas int) time.Duration {
	switch k {
	case RollingRestart:
		return time.Duration(replicas) * 4 * time.Second
	case KillAll:
		return 35 * time.Second // every replica restarted uncleanly waits for the group
	case Kill, PowerLoss, BitFlip, Truncate, DamageRolled, RestartAll, CorruptElect, FsyncEIO:
		return 2 * time.Second
	case Move:
		return 5 * time.Second // the copy and the cut-over
	default:
		return 0
	}
}

// Plan returns the schedule of a fault phase of length d for a group of
// replicas: a pure function of its arguments. It starts with one step of
// every kind, even past d, then draws kinds at random until d.
func Plan(seed int64, d time.Duration, replicas int, opt PlanOptions) []Step {
	kinds := opt.Kinds
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	if opt.GapMin <= 0 {
		opt.GapMin = time.Second
	}
	if opt.GapMax < opt.GapMin {
		opt.GapMax = max(opt.GapMin, 3*time.Second)
	}
	if opt.HoldMax <= 0 {
		opt.HoldMax = 8 * time.Second
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x63686173))
	dur := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	first := append([]Kind(nil), kinds...)
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	var out []Step
	at := dur(opt.GapMin, opt.GapMax)
	// The first cycle runs every kind, however short d is.
	for n := 0; at < d || n < len(first); n++ {
		k := kinds[rng.IntN(len(kinds))]
		if n < len(first) {
			k = first[n]
		}
		s := Step{At: at, Kind: k, Pick: rng.Uint64(), ResetOnHeal: rng.IntN(3) == 0}
		if rng.IntN(2) == 0 {
			s.Role = OnFollower
		}
		switch k {
		case Kill, PowerLoss, Pause, BitFlip, Truncate, DamageRolled, Move:
			s.Hold = dur(500*time.Millisecond, 6*time.Second)
		case CorruptElect:
			s.Hold = dur(3*time.Second, 6*time.Second)
		case IsolateLeader, Partition, OneWay, Delay, MetaIsolate, GroupLinkCut:
			s.Hold = dur(2*time.Second, 8*time.Second)
		case ClockStep:
			// Long enough for the broker to see both steps (it
			// looks every second) and for the timers to run with
			// each.
			s.Hold = dur(3*time.Second, 8*time.Second)
		case DiskFull, DiskStall:
			// Past the disk monitor's poll and an election timeout.
			s.Hold = dur(2*time.Second, 8*time.Second)
		case FsyncEIO:
			s.Hold = dur(500*time.Millisecond, 3*time.Second)
		case Drop:
			s.Hold = dur(200*time.Millisecond, 2*time.Second)
		case RollingRestart:
			s.Hold = dur(200*time.Millisecond, time.Second)
		case KillAll, RestartAll:
			s.Hold = dur(200*time.Millisecond, 3*time.Second)
		}
		if k == IsolateLeader {
			s.Role = OnLeader
		}
		s.Hold = min(s.Hold, opt.HoldMax)
		if opt.Groups > 1 {
			// Drawn last, so a one-group schedule stays what it was.
			s.Group = 1 + rng.IntN(opt.Groups)
		}
		out = append(out, s)
		at += s.Hold + expected(k, replicas) + dur(opt.GapMin, opt.GapMax)
	}
	return out
}
