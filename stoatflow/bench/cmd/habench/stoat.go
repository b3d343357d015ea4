package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

// pod is one word-count pod: a state directory, an HTTP port and a pod id
// it keeps across restarts.
type pod struct {
	id     string
	dir    string
	port   int
	p      *proc
	starts int
}

type haStatus struct {
	Pod        string `json:"selfPodId"`
	Role       string `json:"selfRole"`
	State      string `json:"selfState"`
	LagRecords int64  `json:"replicationLagRecords"`
	Epoch      int64  `json:"tokenEpoch"`
	Holder     string `json:"tokenHolder"`
}

var httpc = &http.Client{Timeout: 2 * time.Second}

func (p *pod) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path) }

func (p *pod) running() bool { return p.p != nil && !p.p.Exited() }

func (p *pod) status() (haStatus, bool) {
	var s haStatus
	if !p.running() {
		return s, false
	}
	resp, err := httpc.Get(p.url("/ha/status"))
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&s) == nil
}

func (s haStatus) active() bool  { return s.Role == "ACTIVE" && s.State == "ACTIVE" }
func (s haStatus) standby() bool { return s.Role == "STANDBY" && s.State == "READY_STANDBY" }

// stoat runs the StoatFlow phase: two pods of examples/wordcount in
// ha.mode active-standby.
type stoat struct {
	b     *bench
	app   string
	pods  []*pod
	hb    time.Duration
	rng   *rand.Rand
	notes *[]string
	// faults are the kills' times and boots the pods' first starts of each
	// boot: a failover claim long after both is a false failover.
	faults, boots []time.Time
}

func (b *bench) newStoat() (*stoat, error) {
	s := &stoat{b: b, app: "habench-wc", rng: rand.New(rand.NewPCG(b.opt.seed, 11)), notes: &b.res.Notes}
	ports, err := benchutil.FreePorts(2)
	if err != nil {
		return nil, err
	}
	for i := range 2 {
		s.pods = append(s.pods, &pod{id: fmt.Sprintf("pod-%d", i), dir: filepath.Join(b.work, "state", fmt.Sprintf("pod-%d", i)), port: ports[i]})
	}
	return s, nil
}

func (s *stoat) note(format string, args ...any) {
	m := fmt.Sprintf(format, args...)
	progressf("NOTE %s", m)
	*s.notes = append(*s.notes, m)
}

func (s *stoat) env(p *pod) []string {
	return []string{
		"STOATFLOW__APPLICATION_ID=" + s.app,
		"STOATFLOW__BOOTSTRAP_SERVERS=" + s.b.br.addr,
		"STOATFLOW__STATE__DIR=" + p.dir,
		"STOATFLOW__HTTP__HOST=127.0.0.1",
		"STOATFLOW__HTTP__PORT=" + strconv.Itoa(p.port),
		"STOATFLOW__HA__MODE=active-standby",
		"STOATFLOW__HA__DESIRED_STANDBYS=1",
		"STOATFLOW__HA__MAX_STANDBYS=2",
		"STOATFLOW__HA__POD_ID=" + p.id,
		"STOATFLOW__HA__HEARTBEAT_MS=" + strconv.FormatInt(s.hb.Milliseconds(), 10),
		"STOATFLOW__HA__STALENESS_MISSES=" + strconv.Itoa(s.b.opt.misses),
	}
}

func (s *stoat) start(p *pod) error {
	p.starts++
	logPath := filepath.Join(s.b.logs, p.id+".log")
	pr, err := startProc(p.id, logPath, s.b.bins.wordcount, []string{"--partitions", strconv.Itoa(s.b.opt.partitions)}, s.env(p), nil)
	if err != nil {
		return err
	}
	p.p = pr
	return nil
}

// waitFor polls p's status every 25 ms until ok holds.
func (s *stoat) waitFor(p *pod, within time.Duration, what string, ok func(haStatus) bool) (time.Time, error) {
	deadline := time.Now().Add(within)
	var last haStatus
	for {
		if p.p == nil || p.p.Exited() {
			return time.Time{}, fmt.Errorf("%s exited while waiting for %s (%v):\n%s", p.id, what, p.p.exitErr(), p.p.tail(20))
		}
		st, good := p.status()
		if good {
			last = st
			if ok(st) {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not %s after %v (last %+v)", p.id, what, within, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// whole waits until one pod is ACTIVE/ACTIVE and the other
// STANDBY/READY_STANDBY, and output is arriving.
func (s *stoat) whole(within time.Duration) (act, sb *pod, err error) {
	deadline := time.Now().Add(within)
	var views []string
	for time.Now().Before(deadline) {
		act, sb, views = nil, nil, nil
		for _, p := range s.pods {
			st, ok := p.status()
			views = append(views, fmt.Sprintf("%s:%s/%s lag=%d", p.id, st.Role, st.State, st.LagRecords))
			if !ok {
				continue
			}
			if st.active() {
				act = p
			} else if st.standby() {
				sb = p
			}
		}
		if fresh, _ := s.b.out.fresh(); act != nil && sb != nil && fresh {
			return act, sb, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, why := s.b.out.fresh()
	return nil, nil, fmt.Errorf("the application is not whole after %v: %s (%s)", within, strings.Join(views, " "), why)
}

// boot (re)starts both pods with the current heartbeat: the first becomes
// the active, the second a standby. Between the two, between is called
// (nil: nothing).
func (s *stoat) boot(between func() error) error {
	s.stopAll()
	s.boots = append(s.boots, time.Now())
	if err := s.start(s.pods[0]); err != nil {
		return err
	}
	if _, err := s.waitFor(s.pods[0], 120*time.Second, "ACTIVE", haStatus.active); err != nil {
		return err
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	if err := s.start(s.pods[1]); err != nil {
		return err
	}
	if _, err := s.waitFor(s.pods[1], 300*time.Second, "READY_STANDBY", haStatus.standby); err != nil {
		return err
	}
	_, _, err := s.whole(60 * time.Second)
	return err
}

// stopAll stops the standby first (a SIGTERM of the active would hand
// over to it), then the active.
func (s *stoat) stopAll() {
	var act []*pod
	for _, p := range s.pods {
		if !p.running() {
			continue
		}
		if st, ok := p.status(); ok && st.Role == "ACTIVE" {
			act = append(act, p)
			continue
		}
		if !p.p.Stop(30 * time.Second) {
			s.note("%s did not stop within 30 s of SIGTERM", p.id)
		}
	}
	for _, p := range act {
		if !p.p.Stop(30 * time.Second) {
			s.note("%s (active) did not stop within 30 s of SIGTERM", p.id)
		}
	}
}

// killResult is one kill -9 of the active.
type killResult struct {
	Pod        string  `json:"pod"`
	TakeoverMs float64 `json:"takeover_ms"`   // kill → the standby says ACTIVE/ACTIVE
	FailoverMs float64 `json:"failover_ms"`   // kill → first visible output whose input was produced after the kill
	GapMs      float64 `json:"output_gap_ms"` // longest gap in visible output across the kill
	RejoinMs   float64 `json:"rejoin_ms"`     // restart of the killed pod → READY_STANDBY
}

// settle waits until the application is whole, then wait more; if the
// roles changed meanwhile (a failover without a fault), it notes that and
// starts again.
func (s *stoat) settle(what string, wait time.Duration) (act, sb *pod, err error) {
	for range 5 {
		if act, sb, err = s.whole(90 * time.Second); err != nil {
			return nil, nil, err
		}
		time.Sleep(wait)
		if st, ok := act.status(); ok && st.active() {
			return act, sb, nil
		}
		s.note("before %s: %s stopped being the active with no fault (a false failover; see the pods' logs around %s)", what, act.id, time.Now().Format("15:04:05.000"))
	}
	return nil, nil, fmt.Errorf("before %s: the roles kept changing", what)
}

func (s *stoat) kill(i int) (killResult, error) {
	act, sb, err := s.settle(fmt.Sprintf("kill %d", i+1), time.Duration(500+s.rng.IntN(1000))*time.Millisecond)
	if err != nil {
		return killResult{}, err
	}
	tk := time.Now()
	s.faults = append(s.faults, tk)
	act.p.Kill()
	r := killResult{Pod: act.id}
	ta, err := s.waitFor(sb, 30*time.Second, "ACTIVE after the kill", haStatus.active)
	if err != nil {
		return r, err
	}
	r.TakeoverMs = ms(ta.Sub(tk))
	to, err := s.waitOutput(tk, tk.UnixMilli(), 30*time.Second)
	if err != nil {
		return r, err
	}
	r.FailoverMs = ms(to.Sub(tk))
	r.GapMs = ms(s.b.out.maxGap(tk, to))
	started := time.Now()
	if err := s.start(act); err != nil {
		return r, err
	}
	tr, err := s.waitFor(act, 120*time.Second, "READY_STANDBY after its restart", haStatus.standby)
	if err != nil {
		return r, err
	}
	r.RejoinMs = ms(tr.Sub(started))
	if st, ok := sb.status(); !ok || !st.active() {
		s.note("kill %d: %s was no longer the active after %s rejoined (%+v)", i, sb.id, act.id, st)
	}
	return r, nil
}

func (s *stoat) waitOutput(from time.Time, ts int64, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		if t, ok := s.b.out.firstAfter(from, ts, nil); ok {
			return t, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no output from input produced after %s within %v", time.UnixMilli(ts).Format("15:04:05.000"), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// switchResult is one POST /ha/switch.
type switchResult struct {
	From       string  `json:"from"`
	TakeoverMs float64 `json:"takeover_ms"`     // POST → the standby says ACTIVE/ACTIVE
	GapMs      float64 `json:"output_gap_ms"`   // longest gap in visible output from the POST on
	BaseGapMs  float64 `json:"baseline_gap_ms"` // longest gap in the 1.5 s before the POST
	NewOutMs   float64 `json:"new_output_ms"`   // POST → first visible output whose input came after the new active said ACTIVE
	DemoteMs   float64 `json:"demote_ms"`       // POST → the old active is READY_STANDBY again
	Retries    int     `json:"retries"`         // 409s before the switch was accepted
}

func (s *stoat) doSwitch(i int) (switchResult, error) {
	act, sb, err := s.settle(fmt.Sprintf("switch %d", i+1), time.Duration(1500+s.rng.IntN(1000))*time.Millisecond)
	if err != nil {
		return switchResult{}, err
	}
	r := switchResult{From: act.id}
	var tp time.Time
	for {
		tp = time.Now()
		resp, err := httpc.Post(act.url("/ha/switch"), "", nil)
		if err != nil {
			return r, fmt.Errorf("switch: %w", err)
		}
		code := resp.StatusCode
		resp.Body.Close()
		if code == http.StatusAccepted {
			break
		}
		if code != http.StatusConflict || r.Retries >= 50 {
			return r, fmt.Errorf("switch: HTTP %d after %d retries", code, r.Retries)
		}
		r.Retries++
		time.Sleep(100 * time.Millisecond)
	}
	ta, err := s.waitFor(sb, 30*time.Second, "ACTIVE after the switch", haStatus.active)
	if err != nil {
		return r, err
	}
	r.TakeoverMs = ms(ta.Sub(tp))
	td, err := s.waitFor(act, 60*time.Second, "READY_STANDBY after the switch", haStatus.standby)
	if err != nil {
		return r, err
	}
	r.DemoteMs = ms(td.Sub(tp))
	to, err := s.waitOutput(ta, ta.UnixMilli(), 30*time.Second)
	if err != nil {
		return r, err
	}
	r.NewOutMs = ms(to.Sub(tp))
	end := to.Add(500 * time.Millisecond)
	if e := tp.Add(2 * time.Second); e.After(end) {
		end = e
	}
	time.Sleep(time.Until(end))
	r.GapMs = ms(s.b.out.maxGap(tp, end))
	r.BaseGapMs = ms(s.b.out.maxGap(tp.Add(-1500*time.Millisecond), tp))
	return r, nil
}

// setResult is the measurements of one (store size, heartbeat) pair.
type setResult struct {
	Store       string         `json:"store"`
	HeartbeatMs int64          `json:"heartbeat_ms"`
	Misses      int            `json:"staleness_misses"`
	Words       int64          `json:"distinct_words"`
	KVBytes     int64          `json:"key_value_bytes"` // the distinct words plus an 8-byte count each
	StoreBytes  int64          `json:"store_bytes"`     // the active's state directory, the larger of before and after the faults
	Changelog   int64          `json:"changelog_bytes"` // on the broker, after the faults
	Kills       []killResult   `json:"kills"`
	Switches    []switchResult `json:"switches"`
	Err         string         `json:"error,omitempty"`
}

func (s *stoat) measure(store string, words, kv int64, kills, switches int) (r setResult) {
	r = setResult{Store: store, HeartbeatMs: s.hb.Milliseconds(), Misses: s.b.opt.misses, Words: words, KVBytes: kv}
	label := fmt.Sprintf("%s hb=%v", store, s.hb)
	// Pebble runs without a write-ahead log: what is still in its
	// memtable is not on disk, so a small store may read as nearly
	// nothing before the faults; read it again after them (the restarts
	// and checkpoints have flushed it).
	r.StoreBytes, r.Changelog = s.sizes()
	defer func() {
		st, chl := s.sizes()
		r.StoreBytes, r.Changelog = max(r.StoreBytes, st), chl
	}()
	for i := range kills {
		k, err := s.kill(i)
		if err != nil {
			r.Err = fmt.Sprintf("kill %d: %v", i+1, err)
			progressf("[%s] %s", label, r.Err)
			return r
		}
		r.Kills = append(r.Kills, k)
		progressf("[%s] kill %d/%d of %s: takeover %.0f ms, first new output %.0f ms, gap %.0f ms, rejoin %.1f s", label, i+1, kills, k.Pod, k.TakeoverMs, k.FailoverMs, k.GapMs, k.RejoinMs/1000)
		s.b.out.trim(time.Minute)
	}
	for i := range switches {
		w, err := s.doSwitch(i)
		if err != nil {
			r.Err = fmt.Sprintf("switch %d: %v", i+1, err)
			progressf("[%s] %s", label, r.Err)
			return r
		}
		r.Switches = append(r.Switches, w)
		progressf("[%s] switch %d/%d from %s: takeover %.0f ms, output gap %.0f ms (baseline %.0f), new output %.0f ms", label, i+1, switches, w.From, w.TakeoverMs, w.GapMs, w.BaseGapMs, w.NewOutMs)
		s.b.out.trim(time.Minute)
	}
	return r
}

// sizes is the active's state directory and the changelog on the broker.
func (s *stoat) sizes() (store, changelog int64) {
	for _, p := range s.pods {
		if st, ok := p.status(); ok && st.Role == "ACTIVE" {
			store = benchutil.DirBytes(p.dir)
		}
	}
	return store, s.b.br.topicBytes(s.app + "-counts-changelog")
}

// preloadVocab writes the vocabulary once, lines of 10 words, and waits
// until the application has consumed it.
func (s *stoat) preloadVocab(topic string) error {
	var lines []string
	for i := 0; i < len(s.b.vocab); i += 10 {
		lines = append(lines, strings.Join(s.b.vocab[i:min(i+10, len(s.b.vocab))], " "))
	}
	cl, err := newProducer(s.b.br.addr)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return produceLines(ctx, cl, topic, lines, s.rng)
}

// preloadLarge writes lines of 20 distinct new words (bigWord) for up to
// d, keeping the application's input lag below a bound so that the run
// ends close to when the writing does, then waits until the active has
// consumed everything and the standby is READY_STANDBY. It returns the
// number of distinct words written.
func (s *stoat) preloadLarge(d time.Duration, maxWords int64) (int64, error) {
	cl, err := newProducer(s.b.br.addr, kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	const perLine, chunk, maxLag = 20, 2000, 20000
	start := time.Now()
	var n int64
	last := time.Now()
	for time.Since(start) < d && n < maxWords {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lag, err := inputLag(ctx, s.b.adm, s.app, "words")
		cancel()
		if err != nil || lag > maxLag {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		lines := make([]string, 0, chunk)
		var sb strings.Builder
		for range chunk {
			sb.Reset()
			for w := range perLine {
				if w > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(bigWord(n, s.b.opt.largeWordLen))
				n++
			}
			lines = append(lines, sb.String())
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		err = produceLines(ctx, cl, "words", lines, s.rng)
		cancel()
		if err != nil {
			return n, err
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			store, chl := s.sizes()
			progressf("[preload large] %s distinct words in %.0fs (%.0f words/s), active store %s, changelog %s; the output consumer's newest input is %v old",
				human(n), time.Since(start).Seconds(), float64(n)/time.Since(start).Seconds(), mb(store), mb(chl), s.b.out.behind().Round(time.Millisecond))
		}
	}
	progressf("[preload large] wrote %s distinct words in %.0fs; waiting for the application to consume them", human(n), time.Since(start).Seconds())
	if err := waitConsumed(s.b.adm, s.app, "words", int64(s.b.opt.rate), 10*time.Minute, "preload large"); err != nil {
		return n, err
	}
	_, _, err = s.whole(10 * time.Minute)
	progressf("[preload large] consumed, the standby is READY_STANDBY and the output consumer is current after %.0fs", time.Since(start).Seconds())
	return n, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// review reads the pods' logs: failover claims that follow no kill (false
// failovers: the active's heartbeats were late), and every WARN or ERROR
// line, counted by message; both go into the notes.
func (s *stoat) review() {
	type line struct {
		Time   time.Time `json:"time"`
		Level  string    `json:"level"`
		Msg    string    `json:"msg"`
		Reason string    `json:"reason"`
		Err    string    `json:"err"`
	}
	near := func(t time.Time, ts []time.Time, d time.Duration) bool {
		for _, x := range ts {
			if !t.Before(x) && t.Sub(x) < d {
				return true
			}
		}
		return false
	}
	warns := map[string]int{}
	var order []string
	for _, p := range s.pods {
		b, err := os.ReadFile(filepath.Join(s.b.logs, p.id+".log"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "{") {
				continue
			}
			var x line
			if json.Unmarshal([]byte(l), &x) != nil {
				continue
			}
			if x.Msg == "claiming the promotion token" && x.Reason == "failover" && !near(x.Time, s.faults, 10*time.Second) && !near(x.Time, s.boots, 10*time.Second) {
				s.note("false failover: %s claimed the token (reason failover) at %s with no kill before it", p.id, x.Time.Format("15:04:05.000"))
			}
			if x.Level == "WARN" || x.Level == "ERROR" {
				k := fmt.Sprintf("%s %q", x.Level, x.Msg)
				if x.Err != "" {
					k += fmt.Sprintf(" (err: %s)", x.Err)
				}
				if warns[k] == 0 {
					order = append(order, k)
				}
				warns[k]++
			}
		}
	}
	for _, k := range order {
		s.note("pod log: %d× %s", warns[k], k)
	}
}
