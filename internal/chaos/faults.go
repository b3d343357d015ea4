package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcluster"
	"github.com/moonmq/moonmq/internal/vfs"
)

// Event is one fault as it happened.
type Event struct {
	// Step is the planned step (zero for the final heal).
	Step Step
	// Kind is what was injected: a planned Kill of a replica that ran in
	// the lossy mode is a PowerLoss, and the other way round.
	Kind Kind
	// Targets are the replicas it hit.
	Targets []int
	// Start and End bound it, from the start of the run.
	Start, End time.Duration
	// Detail says what exactly was done.
	Detail string
}

// String describes the event for logs.
func (e Event) String() string {
	return fmt.Sprintf("%8.1fs-%6.1fs %-15s %v %s", e.Start.Seconds(), e.End.Seconds(), e.Kind, e.Targets, e.Detail)
}

// injector runs the schedule. It runs on the goroutine of the run's
// harness (the test's), because testcluster's process calls fail it with
// Fatal.
type injector struct {
	c    *testcluster.Cluster
	net  *Net
	t0   time.Time
	logf func(string, ...any)
	// topics whose segment files the corruption faults may touch.
	topics []string
	// lossyP is the chance that a start runs in the lossy storage mode;
	// forceEnv, if set, is the LoseUnsyncedEnv value of every start.
	lossyP   float64
	forceEnv string
	replicas int
	// group is the replication group (0 for g1) the running step hits;
	// a run of one group has only group 0. groupOf maps a replica id to
	// its group (nil: all in group 0).
	group   int
	groupOf map[int]int
	// voters are the metadata log's voters (a cluster of groups only).
	voters []int
	// clockDir, if set, holds each replica's wall clock offset file
	// (clockFile), which every start of it reads (clock.OffsetFileEnv).
	clockDir string
	// diskDir, if set, holds each replica's disk faults file (diskFile),
	// which every start of it reads (diskhealth.FaultsFileEnv).
	diskDir string

	mu    sync.Mutex
	lossy map[int]bool
	// broken are the replicas that could not start again (their data
	// was damaged beyond what the broker recovers from); problems says
	// why. They stay down for the rest of the run.
	broken   map[int]bool
	problems []string
	// lossyStarts counts the starts of each replica given the lossy
	// environment, to check against the brokers' own warnings.
	lossyStarts map[int]int
	events      []Event
	cur         string // the fault now running, for the progress line
	rng         *rand.Rand
}

func newInjector(seed int64) *injector {
	return &injector{lossy: map[int]bool{}, broken: map[int]bool{}, lossyStarts: map[int]int{}, rng: rand.New(rand.NewPCG(uint64(seed), 0x6c6f7373))}
}

// env is the testcluster.WithEnv function: each start of a replica runs
// in the lossy mode as chosen by the last decide call, and reads its wall
// clock offset file if the run steps clocks.
func (in *injector) env(id int) []string {
	var env []string
	if in.clockDir != "" {
		env = append(env, clock.OffsetFileEnv+"="+in.clockFile(id))
	}
	if in.diskDir != "" {
		env = append(env, diskhealth.FaultsFileEnv+"="+in.diskFile(id))
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.forceEnv != "" {
		in.lossyStarts[id]++
		return append(env, vfs.LoseUnsyncedEnv+"="+in.forceEnv)
	}
	if in.lossy[id] {
		in.lossyStarts[id]++
		return append(env, vfs.LoseUnsyncedEnv+"="+vfs.LoseUnsynced)
	}
	return env
}

// decide chooses whether the next start of id runs in the lossy mode.
// While both modes are in use, each group keeps at least one replica of
// each, so that a planned kill and a planned power loss both find a
// target.
func (in *injector) decide(id int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.forceEnv != "" {
		in.lossy[id] = true
		return
	}
	in.lossy[id] = in.rng.Float64() < in.lossyP
	if in.lossyP <= 0 || in.lossyP >= 1 || len(in.lossy) < 2 {
		return
	}
	same, decided := true, 0
	for other, l := range in.lossy {
		if in.groupOf[other] != in.groupOf[id] {
			continue
		}
		decided++
		if other != id && l != in.lossy[id] {
			same = false
		}
	}
	if same && decided == in.replicas {
		in.lossy[id] = !in.lossy[id]
	}
}

func (in *injector) isLossy(id int) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lossy[id]
}

func (in *injector) since() time.Duration { return time.Since(in.t0) }

func (in *injector) current() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cur
}

func (in *injector) record(e Event) {
	in.mu.Lock()
	in.events = append(in.events, e)
	in.cur = ""
	in.mu.Unlock()
	in.logf("chaos: fault %s", e)
}

func (in *injector) eventsCopy() []Event {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.events)
}

// start starts r on its data directory, choosing its storage mode first.
// A replica that cannot start is a problem of the run, which goes on
// without it.
func (in *injector) start(r *testcluster.Replica) {
	if in.isBroken(r.ID) || r.Running() {
		return
	}
	in.decide(r.ID)
	if err := r.TryStart(); err != nil {
		lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
		if len(lines) > 12 {
			lines = append(lines[:1], lines[len(lines)-11:]...)
		}
		msg := fmt.Sprintf("at %.1fs replica %d could not start again and stays down: %s", in.since().Seconds(), r.ID, strings.Join(lines, "\n    "))
		in.mu.Lock()
		in.broken[r.ID] = true
		in.problems = append(in.problems, msg)
		in.mu.Unlock()
		in.logf("chaos: PROBLEM: %s", msg)
	}
}

// startAll starts every replica that is down (and not broken).
func (in *injector) startAll() {
	for _, r := range in.c.Replicas {
		in.start(r)
	}
}

func (in *injector) isBroken(id int) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.broken[id]
}

// target picks the replica the role names among the running, unpaused
// replicas, preferring those for which ok holds.
func (in *injector) target(role Role, rng *rand.Rand, ok func(*testcluster.Replica) bool) *testcluster.Replica {
	up := in.up()
	if len(up) == 0 {
		return nil
	}
	leader, _ := in.leader()
	var cands []*testcluster.Replica
	for _, r := range up {
		if (role == OnLeader) == (r == leader) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		cands = up
	}
	if ok != nil {
		// What ok asks for (the storage mode of a kill) matters more than
		// the role: without it the planned kind would not happen.
		for _, pool := range [][]*testcluster.Replica{cands, up} {
			var good []*testcluster.Replica
			for _, r := range pool {
				if ok(r) {
					good = append(good, r)
				}
			}
			if len(good) > 0 {
				return good[rng.IntN(len(good))]
			}
		}
	}
	return cands[rng.IntN(len(cands))]
}

// sleep waits d; the schedule's waits are not cut short.
func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// run executes every step, each from its planned time or as soon as the
// one before it has ended, until stop is closed (nil: never); it returns
// how many steps ran. A step that has begun runs to its end.
func (in *injector) run(steps []Step, stop <-chan struct{}) int {
	begin := time.Now()
	for i, s := range steps {
		select {
		case <-stop:
			return i
		default:
		}
		if wait := time.Until(begin.Add(s.At)); wait > 0 {
			tm := time.NewTimer(wait)
			select {
			case <-tm.C:
			case <-stop:
				tm.Stop()
				return i
			}
		}
		in.mu.Lock()
		in.cur = string(s.Kind)
		in.mu.Unlock()
		in.exec(s)
	}
	return len(steps)
}

func (in *injector) exec(s Step) {
	rng := rand.New(rand.NewPCG(s.Pick, 0x70696b))
	in.group = max(s.Group-1, 0)
	e := Event{Step: s, Kind: s.Kind, Start: in.since()}
	defer func() {
		e.End = in.since()
		in.record(e)
	}()
	switch s.Kind {
	case Kill, PowerLoss:
		want := s.Kind == PowerLoss
		r := in.target(s.Role, rng, func(r *testcluster.Replica) bool { return in.isLossy(r.ID) == want })
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		if in.isLossy(r.ID) {
			e.Kind = PowerLoss
		} else {
			e.Kind = Kill
		}
		e.Targets = []int{r.ID}
		r.Kill()
		sleep(s.Hold)
		in.start(r)
		e.Detail = fmt.Sprintf("SIGKILL, down %v", s.Hold.Round(time.Millisecond))
	case Pause:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		r.Pause()
		sleep(s.Hold)
		r.Resume()
		e.Detail = fmt.Sprintf("SIGSTOP for %v", s.Hold.Round(time.Millisecond))
	case IsolateLeader:
		r := in.target(OnLeader, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		in.net.Isolate(r.ID)
		e.Detail = "replication links blackholed both ways, client link open: " + in.net.Describe()
		sleep(s.Hold)
		in.net.Heal(s.ResetOnHeal)
	case Partition:
		ids := in.ids()
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		minority := 1 + rng.IntN(max(1, (len(ids)-1)/2))
		// The role decides whether the leader is in the minority.
		if l, _ := in.leader(); l != nil {
			i := slices.Index(ids, l.ID)
			j := 0
			if s.Role == OnFollower {
				j = len(ids) - 1
			}
			ids[i], ids[j] = ids[j], ids[i]
		}
		small, big := ids[:minority], ids[minority:]
		sort.Ints(small)
		sort.Ints(big)
		in.net.Partition(small, big)
		cutClients := rng.IntN(2) == 0
		if cutClients {
			for _, id := range small {
				in.net.Client(id).Blackhole(true, true)
			}
		}
		e.Targets = small
		e.Detail = fmt.Sprintf("%v | %v, minority's clients cut: %v", small, big, cutClients)
		sleep(s.Hold)
		in.net.Heal(s.ResetOnHeal)
	case OneWay:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		others := slices.DeleteFunc(in.ids(), func(id int) bool { return id == r.ID })
		if rng.IntN(2) == 0 {
			to := others[rng.IntN(len(others))]
			in.net.Cut(r.ID, to)
			e.Detail = fmt.Sprintf("%d cannot reach %d", r.ID, to)
		} else if rng.IntN(2) == 0 {
			for _, to := range others {
				in.net.Cut(r.ID, to)
			}
			e.Detail = fmt.Sprintf("%d reaches nobody, everybody reaches it", r.ID)
		} else {
			for _, from := range others {
				in.net.Cut(from, r.ID)
			}
			e.Detail = fmt.Sprintf("nobody reaches %d, it reaches everybody", r.ID)
		}
		e.Targets = []int{r.ID}
		sleep(s.Hold)
		in.net.Heal(s.ResetOnHeal)
	case Delay:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		d := time.Duration(20+rng.IntN(280)) * time.Millisecond
		in.net.Delay(r.ID, d)
		e.Targets = []int{r.ID}
		e.Detail = fmt.Sprintf("+%v on every replication link", d)
		sleep(s.Hold)
		in.net.Heal(false)
	case Drop:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		n := 1 + rng.IntN(4)
		var how []string
		for i := range n {
			reset := rng.IntN(2) == 0
			in.net.DropConns(r.ID, reset)
			if reset {
				how = append(how, "RST")
			} else {
				how = append(how, "FIN")
			}
			if i < n-1 {
				sleep(s.Hold / time.Duration(n))
			}
		}
		e.Detail = "connections of every link ended: " + strings.Join(how, ",")
	case RollingRestart:
		order := in.members()
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		if s.Role == OnFollower {
			// An operator's order: followers first, the leader last.
			if l, _ := in.leader(); l != nil {
				order = append(slices.DeleteFunc(order, func(r *testcluster.Replica) bool { return r == l }), l)
			}
		}
		var steps []string
		for _, r := range order {
			if !r.Running() {
				continue
			}
			if r.Paused() {
				r.Resume()
			}
			t := time.Now()
			r.Stop(30 * time.Second)
			sleep(s.Hold)
			in.start(r)
			e.Targets = append(e.Targets, r.ID)
			ok := in.waitISR(r.ID, 30*time.Second)
			steps = append(steps, fmt.Sprintf("%d (%.1fs, back in ISR: %v)", r.ID, time.Since(t).Seconds(), ok))
		}
		e.Detail = "SIGTERM and start, in turn: " + strings.Join(steps, ", ")
	case KillAll:
		var lossy []int
		for _, r := range in.members() {
			if r.Running() {
				if in.isLossy(r.ID) {
					lossy = append(lossy, r.ID)
				}
				r.Kill()
				e.Targets = append(e.Targets, r.ID)
			}
		}
		sleep(s.Hold)
		in.startAll()
		e.Detail = fmt.Sprintf("SIGKILL all, down %v; lost power (lossy mode): %v", s.Hold.Round(time.Millisecond), lossy)
	case RestartAll:
		var wg sync.WaitGroup
		for _, r := range in.members() {
			if r.Running() {
				e.Targets = append(e.Targets, r.ID)
				wg.Add(1)
				go func() { defer wg.Done(); stopQuietly(r) }()
			}
		}
		wg.Wait()
		sleep(s.Hold)
		in.startAll()
		e.Detail = fmt.Sprintf("SIGTERM all at once, down %v", s.Hold.Round(time.Millisecond))
	case CorruptElect:
		e.Detail = in.corruptElect(s, rng, &e)
	case DiskFull, DiskStall, FsyncEIO:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		e.Detail = in.diskFault(s, r, rng)
	case ClockStep:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		e.Detail = in.stepClock(r, s.Hold)
	case BitFlip, Truncate, DamageRolled:
		r := in.target(s.Role, rng, nil)
		if r == nil {
			e.Detail = "skipped: no replica up"
			return
		}
		e.Targets = []int{r.ID}
		how := "SIGKILL"
		if rng.IntN(10) < 3 {
			how = "SIGTERM"
			r.Stop(30 * time.Second)
		} else {
			r.Kill()
		}
		what := in.corrupt(r, s.Kind, rng)
		sleep(s.Hold)
		in.start(r)
		e.Detail = fmt.Sprintf("stopped with %s; %s", how, what)
	case MetaIsolate:
		e.Detail = in.metaIsolate(s, &e)
	case Move:
		e.Detail = in.move(s, rng, &e)
	case GroupLinkCut:
		var cut []int
		if rng.IntN(3) == 0 {
			cut = in.allIDs()
			e.Detail = "no group reaches another"
		} else {
			cut = in.ids()
			e.Detail = fmt.Sprintf("the other groups cannot reach g%d", in.group+1)
		}
		e.Targets = cut
		in.net.CutGroupLinks(cut)
		sleep(s.Hold)
		in.net.Heal(s.ResetOnHeal)
	default:
		e.Detail = "unknown kind"
	}
}

// metaIsolate cuts the metadata log's leader off from the other voters
// for the step's hold and says what happened.
func (in *injector) metaIsolate(s Step, e *Event) string {
	// A step right after a voter's restart may find an election going
	// on: wait for its outcome.
	var leader int
	_ = testcluster.Poll(10*time.Second, func() (bool, string) {
		leader = in.metaLeader()
		return leader != 0, ""
	})
	if leader == 0 {
		return "skipped: no metadata leader known for 10 s"
	}
	e.Targets = []int{leader}
	for _, v := range in.voters {
		if v != leader {
			in.net.Cut(leader, v)
			in.net.Cut(v, leader)
		}
	}
	what := in.net.Describe()
	sleep(s.Hold)
	after := in.metaLeader()
	in.net.Heal(s.ResetOnHeal)
	return fmt.Sprintf("metadata leader %d cut off from the other voters %v (%s); after %v the leader was %d",
		leader, in.voters, what, s.Hold.Round(time.Millisecond), after)
}

// metaLeader returns the metadata log's leader as the running voters
// report it (by the highest term; 0 if none says it leads).
func (in *injector) metaLeader() int {
	var leader int
	var term uint64
	for _, r := range in.c.Up() {
		st, err := r.Status()
		if err != nil || st.Metadata == nil {
			continue
		}
		if m := st.Metadata; m.Voter && m.Role == "leader" && m.Term >= term {
			leader, term = r.ID, m.Term
		}
	}
	return leader
}

// allIDs are the ids of every replica of every group.
func (in *injector) allIDs() []int {
	var ids []int
	for _, r := range in.c.Replicas {
		ids = append(ids, r.ID)
	}
	return ids
}

// members are the replicas of the group the running step hits.
func (in *injector) members() []*testcluster.Replica { return in.c.InGroup(in.group) }

// up are the members whose process runs and is not paused.
func (in *injector) up() []*testcluster.Replica {
	return slices.DeleteFunc(in.members(), func(r *testcluster.Replica) bool { return !r.Running() || r.Paused() })
}

// leader is the serving leader of the group the running step hits.
func (in *injector) leader() (*testcluster.Replica, status.Replication) {
	return in.c.ServingLeaderOf(in.group)
}

func (in *injector) ids() []int {
	var ids []int
	for _, r := range in.members() {
		ids = append(ids, r.ID)
	}
	return ids
}

// waitISR waits until the group's serving leader reports id in its
// committed ISR.
func (in *injector) waitISR(id int, within time.Duration) bool {
	return testcluster.Poll(within, func() (bool, string) {
		_, st := in.leader()
		return slices.Contains(st.ISR, int32(id)), ""
	}) == nil
}

// corrupt damages one segment file of a stopped replica's workload topics
// and says what it did.
func (in *injector) corrupt(r *testcluster.Replica, k Kind, rng *rand.Rand) string {
	type seg struct {
		path string
		size int64
	}
	var segs []seg
	for _, t := range in.topics {
		files, _ := filepath.Glob(filepath.Join(r.DataDir, "topics", t, "*", "*.log"))
		for _, f := range files {
			if size := dataEnd(f); size > 0 {
				segs = append(segs, seg{f, size})
			}
		}
	}
	if len(segs) == 0 {
		return "no non-empty segment file to corrupt"
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].path < segs[j].path })
	// BitFlip and Truncate damage the newest segment of a partition (the
	// one start-up recovery scans); DamageRolled an older one.
	newest := map[string]seg{}
	var dirs []string
	for _, s := range segs {
		d := filepath.Dir(s.path)
		if _, ok := newest[d]; !ok {
			dirs = append(dirs, d)
		}
		newest[d] = s
	}
	var pick seg
	if k == DamageRolled {
		var rolled []seg
		for _, s := range segs {
			if newest[filepath.Dir(s.path)] != s {
				rolled = append(rolled, s)
			}
		}
		if len(rolled) == 0 {
			return "no rolled segment yet: nothing damaged"
		}
		pick = rolled[rng.IntN(len(rolled))]
		if rng.IntN(2) == 0 {
			k = Truncate
		} else {
			k = BitFlip
		}
	} else {
		pick = newest[dirs[rng.IntN(len(dirs))]]
	}
	rel, _ := filepath.Rel(r.DataDir, pick.path)
	f, err := os.OpenFile(pick.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Sprintf("open %s: %v", rel, err)
	}
	defer f.Close()
	if k == Truncate {
		cut := 1 + rng.Int64N(min(pick.size, 64<<10))
		if err := f.Truncate(pick.size - cut); err != nil {
			return fmt.Sprintf("truncate %s: %v", rel, err)
		}
		return fmt.Sprintf("cut the last %d of %d bytes of %s", cut, pick.size, rel)
	}
	n := 1 + rng.IntN(3)
	var flips []string
	for range n {
		// Mostly near the end, where the newest records are.
		var pos int64
		if rng.IntN(2) == 0 {
			pos = pick.size - 1 - rng.Int64N(min(pick.size, 4096))
		} else {
			pos = rng.Int64N(pick.size)
		}
		bit := byte(1) << rng.IntN(8)
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, pos); err != nil {
			return fmt.Sprintf("read %s: %v", rel, err)
		}
		b[0] ^= bit
		if _, err := f.WriteAt(b, pos); err != nil {
			return fmt.Sprintf("write %s: %v", rel, err)
		}
		flips = append(flips, fmt.Sprintf("byte %d bit %d", pos, bitIndex(bit)))
	}
	if err := f.Sync(); err != nil {
		return fmt.Sprintf("sync %s: %v", rel, err)
	}
	return fmt.Sprintf("flipped %s of %s (%d bytes)", strings.Join(flips, ", "), rel, pick.size)
}

// dataEnd is where the data of the segment file at path ends: its size,
// less the zeros a killed broker's active segment may hold reserved
// beyond its last batch (a cut or a flip there would damage nothing).
// 0 when the file cannot be read.
func dataEnd(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	end := fi.Size()
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := min(end, int64(len(buf)))
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				return end - n + i + 1
			}
		}
		end -= n
	}
	return 0
}

func bitIndex(b byte) int {
	for i := range 8 {
		if b == 1<<i {
			return i
		}
	}
	return -1
}

// healAll undoes whatever is left at the end of the fault phase: every
// link passes, paused replicas continue, stopped ones start.
func (in *injector) healAll() {
	e := Event{Kind: "heal", Start: in.since()}
	in.net.Heal(false)
	for _, r := range in.c.Replicas {
		if r.Paused() {
			r.Resume()
			e.Targets = append(e.Targets, r.ID)
		}
	}
	for _, r := range in.c.Replicas {
		if !r.Running() && !in.isBroken(r.ID) {
			e.Targets = append(e.Targets, r.ID)
		}
	}
	in.startAll()
	e.End = in.since()
	e.Detail = "every link passes, every replica runs"
	in.record(e)
}

// corruptElect runs the CorruptElect scenario and says what happened.
func (in *injector) corruptElect(s Step, rng *rand.Rand, e *Event) string {
	leader, _ := in.leader()
	if leader == nil {
		return "skipped: no serving leader"
	}
	var followers []*testcluster.Replica
	for _, r := range in.up() {
		if r != leader {
			followers = append(followers, r)
		}
	}
	if len(followers) < 2 {
		return "skipped: fewer than two followers up"
	}
	a := followers[rng.IntN(len(followers))]
	e.Targets = []int{a.ID, leader.ID}
	stopped := time.Now()
	a.Stop(30 * time.Second)
	var cuts []string
	for _, t := range in.topics {
		dirs, _ := filepath.Glob(filepath.Join(a.DataDir, "topics", t, "*"))
		for _, d := range dirs {
			segs, _ := filepath.Glob(filepath.Join(d, "*.log"))
			if len(segs) == 0 {
				continue
			}
			sort.Strings(segs)
			last := segs[len(segs)-1]
			size := dataEnd(last)
			if size == 0 {
				continue
			}
			cut := min(size, 4<<10+rng.Int64N(28<<10))
			if err := os.Truncate(last, size-cut); err == nil {
				rel, _ := filepath.Rel(a.DataDir, last)
				cuts = append(cuts, fmt.Sprintf("%s -%d", rel, cut))
			}
		}
	}
	var cutOff []int
	for _, c := range followers {
		if c == a {
			continue
		}
		for _, o := range in.ids() {
			if o != c.ID {
				in.net.Cut(c.ID, o)
			}
		}
		cutOff = append(cutOff, c.ID)
	}
	in.start(a)
	_, st := in.leader()
	inISR := slices.Contains(st.ISR, int32(a.ID))
	down := time.Since(stopped)
	leader.Kill()
	sleep(s.Hold)
	served, sst := in.leader()
	who := "nobody"
	if served != nil {
		who = fmt.Sprintf("replica %d (epoch %d)", served.ID, sst.Epoch)
	}
	in.net.Heal(false)
	in.start(leader)
	return fmt.Sprintf("%d stopped with SIGTERM, cut %s, started after %v (in the ISR then: %v); leader %d killed with SIGKILL; %v could not reach anyone; after %v %s served",
		a.ID, strings.Join(cuts, ", "), down.Round(time.Millisecond), inISR, leader.ID, cutOff, s.Hold.Round(time.Millisecond), who)
}
