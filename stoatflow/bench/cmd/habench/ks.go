package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ksInst is one Kafka Streams instance: a state directory kept across
// restarts, and what its stdout said last (STATE and TASKS lines).
type ksInst struct {
	id  string
	dir string
	p   *proc

	mu      sync.Mutex
	state   string
	active  []string
	standby []string
	changed time.Time // when the task lines last changed
	lag     int64     // the latest LAG line: its store partitions' largest offset lag
	lagAt   time.Time
}

func (k *ksInst) onLine(line string) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch f[0] {
	case "STATE":
		if len(f) >= 3 {
			k.state = f[2]
		}
	case "LAG":
		if len(f) >= 3 {
			k.lag, _ = strconv.ParseInt(f[2], 10, 64)
			k.lagAt = time.Now()
		}
	case "TASKS":
		k.active, k.standby = nil, nil
		for _, kv := range f[2:] {
			name, v, _ := strings.Cut(kv, "=")
			var ids []string
			if v != "" {
				ids = strings.Split(v, ",")
			}
			switch name {
			case "active":
				k.active = ids
			case "standby":
				k.standby = ids
			}
		}
		k.changed = time.Now()
	}
}

func (k *ksInst) lagView() (int64, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lag, k.lagAt
}

func (k *ksInst) view() (state string, active, standby []string, changed time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state, append([]string(nil), k.active...), append([]string(nil), k.standby...), k.changed
}

func (k *ksInst) running() bool { return k.p != nil && !k.p.Exited() }

// countParts are the partitions of the counting sub-topology's tasks
// (1_<partition>) among ids.
func countParts(ids []string) []int {
	var out []int
	for _, id := range ids {
		if rest, ok := strings.CutPrefix(id, "1_"); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				out = append(out, n)
			}
		}
	}
	sort.Ints(out)
	return out
}

// ksCaughtUp is Kafka Streams' default acceptable.recovery.lag, the lag
// at which it counts a standby as caught up.
const ksCaughtUp = 10000

type ksRun struct {
	b     *bench
	app   string
	insts []*ksInst
	out   *watcher
	rng   *rand.Rand

	session, heartbeat time.Duration // 0: Kafka Streams' default
}

// ksKill is one kill -9 of a Kafka Streams instance.
type ksKill struct {
	Inst        string  `json:"instance"`
	Parts       []int   `json:"count_partitions"` // partitions of the count tasks it had active
	FailoverMs  float64 `json:"failover_ms"`      // kill → first visible output on one of Parts from input produced after the kill
	AllMs       float64 `json:"all_ms"`           // … on every one of Parts
	TakeoverMs  float64 `json:"takeover_ms"`      // kill → the survivor lists every one of Parts' count tasks as active
	GapMs       float64 `json:"output_gap_ms"`    // longest gap in visible output on the whole topic
	RestartedMs float64 `json:"rejoin_ms"`        // restart of the killed instance → whole again (standby within 10,000 records, assignment stable 3 s)
}

type ksSet struct {
	Name      string   `json:"name"`
	SessionMs int64    `json:"session_timeout_ms"`
	Heartbeat int64    `json:"heartbeat_interval_ms"`
	Kills     []ksKill `json:"kills"`
	Err       string   `json:"error,omitempty"`
}

func (r *ksRun) start(k *ksInst) error {
	args := []string{"-Xmx1g", "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS", "-cp", r.b.bins.ksClasspath, "io.moonmq.habench.KsHaApp",
		"--app-id", r.app, "--bootstrap", r.b.br.addr, "--input", "ks-words", "--output", "ks-word-counts", "--state-dir", k.dir}
	if r.session > 0 {
		args = append(args, "--session-timeout-ms", strconv.FormatInt(r.session.Milliseconds(), 10))
	}
	if r.heartbeat > 0 {
		args = append(args, "--heartbeat-interval-ms", strconv.FormatInt(r.heartbeat.Milliseconds(), 10))
	}
	k.mu.Lock()
	k.state, k.active, k.standby, k.changed, k.lag, k.lagAt = "", nil, nil, time.Now(), -1, time.Time{}
	k.mu.Unlock()
	p, err := startProc(k.id, filepath.Join(r.b.logs, k.id+".log"), r.b.bins.java, args, nil, k.onLine)
	if err != nil {
		return err
	}
	k.p = p
	return nil
}

// whole waits until both instances are RUNNING, every count task is
// active on one and standby on the other, the assignment has not changed
// for stable, and output arrives.
func (r *ksRun) whole(within, stable time.Duration) error {
	deadline := time.Now().Add(within)
	var why string
	for time.Now().Before(deadline) {
		why = ""
		act := map[int]string{}
		sb := map[int]string{}
		for _, k := range r.insts {
			st, a, s, ch := k.view()
			if !k.running() {
				why = k.id + " is not running"
				break
			}
			if st != "RUNNING" {
				why = k.id + " is " + st
				break
			}
			if time.Since(ch) < stable {
				why = k.id + "'s tasks changed " + time.Since(ch).Round(time.Millisecond).String() + " ago"
			}
			for _, p := range countParts(a) {
				act[p] = k.id
			}
			for _, p := range countParts(s) {
				sb[p] = k.id
			}
			// A standby that is still restoring would make the next
			// failover a restore: wait, as StoatFlow waits for
			// READY_STANDBY, until it is within Kafka Streams' own
			// acceptable.recovery.lag (10,000 records).
			if lag, at := k.lagView(); why == "" && len(countParts(s)) > 0 && (lag < 0 || lag > ksCaughtUp || time.Since(at) > 5*time.Second) {
				why = fmt.Sprintf("%s's standby tasks lag %d records (%v ago)", k.id, lag, time.Since(at).Round(time.Millisecond))
			}
		}
		if why == "" {
			for p := range r.b.opt.partitions {
				if act[p] == "" || sb[p] == "" || act[p] == sb[p] {
					why = fmt.Sprintf("count task 1_%d: active on %q, standby on %q", p, act[p], sb[p])
					break
				}
			}
		}
		if why == "" {
			if fresh, w := r.out.fresh(); !fresh {
				why = w
			}
		}
		if why == "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("Kafka Streams not whole after %v: %s", within, why)
}

func (r *ksRun) stopAll() {
	for _, k := range r.insts {
		if k.running() && !k.p.Stop(40*time.Second) {
			progressf("[kstreams] %s did not stop within 40 s of SIGTERM", k.id)
		}
	}
}

func (r *ksRun) kill(i int) (ksKill, error) {
	if err := r.whole(5*time.Minute, 3*time.Second); err != nil {
		return ksKill{}, err
	}
	// The instance with the most active count tasks.
	victim, other := r.insts[0], r.insts[1]
	_, a0, _, _ := r.insts[0].view()
	_, a1, _, _ := r.insts[1].view()
	if len(countParts(a1)) > len(countParts(a0)) {
		victim, other = r.insts[1], r.insts[0]
	}
	_, va, _, _ := victim.view()
	res := ksKill{Inst: victim.id, Parts: countParts(va)}
	time.Sleep(time.Duration(500+r.rng.IntN(1000)) * time.Millisecond)
	tk := time.Now()
	victim.p.Kill()
	limit := 2*r.sessionOrDefault() + 60*time.Second
	deadline := time.Now().Add(limit)
	var took, all, over time.Time
	for took.IsZero() || all.IsZero() || over.IsZero() {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("after %v: first output %v, every partition %v, takeover %v (survivor %s)", limit, !took.IsZero(), !all.IsZero(), !over.IsZero(), other.id)
		}
		if !other.running() {
			return res, fmt.Errorf("the surviving instance %s exited:\n%s", other.id, other.p.tail(20))
		}
		if took.IsZero() {
			took, _ = r.out.firstAfter(tk, tk.UnixMilli(), res.Parts)
		}
		if all.IsZero() {
			all, _ = r.out.allAfter(tk, tk.UnixMilli(), res.Parts)
		}
		if over.IsZero() {
			_, a, _, ch := other.view()
			have := map[int]bool{}
			for _, p := range countParts(a) {
				have[p] = true
			}
			ok := ch.After(tk)
			for _, p := range res.Parts {
				ok = ok && have[p]
			}
			if ok {
				over = ch
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.FailoverMs, res.AllMs, res.TakeoverMs = ms(took.Sub(tk)), ms(all.Sub(tk)), ms(over.Sub(tk))
	res.GapMs = ms(r.out.maxGap(tk, all))
	started := time.Now()
	if err := r.start(victim); err != nil {
		return res, err
	}
	if err := r.whole(5*time.Minute, 3*time.Second); err != nil {
		return res, err
	}
	res.RestartedMs = ms(time.Since(started))
	return res, nil
}

func (r *ksRun) sessionOrDefault() time.Duration {
	if r.session > 0 {
		return r.session
	}
	return 45 * time.Second
}

func (r *ksRun) measure(name string, session, heartbeat time.Duration, kills int) ksSet {
	r.stopAll()
	r.session, r.heartbeat = session, heartbeat
	set := ksSet{Name: name, SessionMs: r.sessionOrDefault().Milliseconds(), Heartbeat: heartbeat.Milliseconds()}
	if heartbeat == 0 {
		set.Heartbeat = 3000
	}
	for _, k := range r.insts {
		if err := r.start(k); err != nil {
			set.Err = err.Error()
			return set
		}
	}
	if err := r.whole(5*time.Minute, 5*time.Second); err != nil {
		set.Err = err.Error()
		progressf("[kstreams %s] %v", name, err)
		return set
	}
	for i := range kills {
		k, err := r.kill(i)
		if err != nil {
			set.Err = fmt.Sprintf("kill %d: %v", i+1, err)
			progressf("[kstreams %s] %s", name, set.Err)
			return set
		}
		set.Kills = append(set.Kills, k)
		progressf("[kstreams %s] kill %d/%d of %s (count tasks %v): first output %.1f s, all partitions %.1f s, takeover %.1f s, gap %.1f s, rejoin %.1f s",
			name, i+1, kills, k.Inst, k.Parts, k.FailoverMs/1000, k.AllMs/1000, k.TakeoverMs/1000, k.GapMs/1000, k.RestartedMs/1000)
		r.out.trim(3 * time.Minute)
	}
	return set
}
