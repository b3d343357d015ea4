package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// haStatus is the part of GET /ha/status the tests read.
type haStatus struct {
	SelfPodID  string `json:"selfPodId"`
	SelfRole   string `json:"selfRole"`
	SelfState  string `json:"selfState"`
	TokenEpoch int64  `json:"tokenEpoch"`
	Holder     string `json:"tokenHolder"`
	Ready      int    `json:"readyStandbyCount"`
}

func (in *instance) haStatus() (haStatus, bool) {
	var s haStatus
	resp, err := http.Get(in.url("/ha/status"))
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&s) == nil
}

// pods starts n pods of one active-standby application.
func haPods(t *testing.T, bootstrap string, n int, env ...string) (*wordcount, []*instance) {
	w := newWordcount(t, bootstrap, append([]string{"STOATFLOW__HA__MODE=active-standby",
		fmt.Sprintf("STOATFLOW__HA__DESIRED_STANDBYS=%d", n-1), fmt.Sprintf("STOATFLOW__HA__MAX_STANDBYS=%d", n)}, env...)...)
	var pods []*instance
	for i := 0; i < n; i++ {
		in := w.instance()
		in.podID = fmt.Sprintf("pod-%d", i)
		pods = append(pods, in)
	}
	return w, pods
}

// activeOf waits until exactly one pod says it is the active and the
// others agree on the holder, and returns it.
func activeOf(t *testing.T, pods []*instance, within time.Duration) *instance {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		var act []*instance
		var views []string
		for _, p := range pods {
			if p.proc == nil || p.proc.Exited() {
				continue
			}
			s, ok := p.haStatus()
			if !ok {
				views = append(views, p.podID+":?")
				continue
			}
			views = append(views, fmt.Sprintf("%s:%s/%s holder=%s@%d", p.podID, s.SelfRole, s.SelfState, s.Holder, s.TokenEpoch))
			if s.SelfRole == "ACTIVE" && s.SelfState == "ACTIVE" {
				act = append(act, p)
			}
		}
		last = strings.Join(views, " ")
		if len(act) == 1 {
			return act[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no single active after %v: %s", within, last)
	return nil
}

// TestHAFailover runs 1 active and 2 standbys and kills the active with
// SIGKILL again and again while input arrives: a standby takes over each
// time, the killed pod comes back as a standby, and the output stays
// exactly-once.
func TestHAFailover(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 3)
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 11)
	rng := rand.New(rand.NewPCG(11, 12))
	const failovers = 100
	var worst, sum time.Duration
	for i := 0; i < failovers; i++ {
		time.Sleep(time.Duration(150+rng.IntN(350)) * time.Millisecond)
		act.proc.Kill()
		killed := time.Now()
		var rest []*instance
		for _, p := range pods {
			if p != act {
				rest = append(rest, p)
			}
		}
		next := activeOf(t, rest, 20*time.Second)
		took := time.Since(killed)
		sum += took
		worst = max(worst, took)
		act.start()
		act = next
		if i%25 == 24 {
			// Everything committed so far is exactly-once: pause the
			// input, let the new active catch up, check, go on.
			f.stopFeeding()
			want, _ := expectedCounts(t, c.Bootstrap())
			act.waitCounts(want, 60*time.Second)
			checkExactlyOnce(t, c.Bootstrap(), w.app, want)
			t.Logf("after %d failovers: exactly-once; takeover mean %v, worst %v", i+1, (sum / time.Duration(i+1)).Round(time.Millisecond), worst.Round(time.Millisecond))
			f = startFeeder(t, c.Bootstrap(), uint64(100+i))
		}
	}
	f.stopFeeding()
	finishExactlyOnce(t, c.Bootstrap(), w.app, act, pods, 60*time.Second)
}

// TestHANetworkCut cuts the network between the active and the broker
// (a proxy that stalls every byte) while the standbys still reach the
// broker: a standby takes over within failure detection and processes,
// the cut pod cannot commit anything once it is fenced, and when the
// network heals it finds itself fenced and rejoins as a standby. The
// output stays exactly-once throughout.
func TestHANetworkCut(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 3)
	proxy := testenv.StartCutProxy(t, c.Bootstrap())
	cut := pods[0]
	// The broker advertises the address the test dialled, so the cut
	// pod's dialer maps it to the proxy for every connection.
	cut.start("STOATFLOW_TEST_BROKER_VIA=" + c.Bootstrap() + "=" + proxy.Addr())
	waitTopic(t, c.Bootstrap(), "words")
	if a := activeOf(t, pods[:1], 30*time.Second); a != cut {
		t.Fatal("the first pod is not the active")
	}
	for _, p := range pods[1:] {
		p.start()
	}
	waitReadyStandbys(t, cut, 2, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 41)
	time.Sleep(2 * time.Second)

	proxy.Cut()
	cutAt := time.Now()
	next := activeOf(t, pods[1:], 20*time.Second)
	t.Logf("%s took over %v after the cut", next.podID, time.Since(cutAt).Round(time.Millisecond))
	// The new active processes while the old one is still cut off.
	before := next.recordsIn("words")
	deadline := time.Now().Add(20 * time.Second)
	for next.recordsIn("words") <= before {
		if time.Now().After(deadline) {
			t.Fatalf("the new active processes nothing while the old one is cut off:\n%s", tail(next.proc.Log(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)

	proxy.Heal()
	rejoinedAsStandby(t, "the healed pod", cut, next, pods, 60*time.Second)
	f.stopFeeding()
	finishExactlyOnce(t, c.Bootstrap(), w.app, next, pods, 60*time.Second)
}

// rejoinedAsStandby waits until the old active says it is a standby and
// the new one is still the only active.
func rejoinedAsStandby(t *testing.T, what string, old, next *instance, pods []*instance, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, ok := old.haStatus()
		if ok && s.SelfRole == "STANDBY" {
			break
		}
		if time.Now().After(deadline) || old.proc.Exited() {
			t.Fatalf("%s did not become a standby (%+v):\n%s", what, s, tail(old.proc.Log(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := activeOf(t, pods, 10*time.Second); a != next {
		t.Fatalf("%s is active after %s came back, want %s", a.podID, what, next.podID)
	}
}

// waitReadyStandbys waits until a pod counts n ready standbys.
func waitReadyStandbys(t *testing.T, p *instance, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, ok := p.haStatus()
		if ok && s.Ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sees %d ready standbys after %v, want %d", p.podID, s.Ready, within, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (in *instance) metricsText() string {
	resp, err := http.Get(in.url("/metrics"))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// recordsIn sums stoatflow_records_in_total{topic} on a pod's /metrics.
func (in *instance) recordsIn(topic string) int64 {
	prefix := fmt.Sprintf(`stoatflow_records_in_total{topic="%s"} `, topic)
	for _, l := range strings.Split(in.metricsText(), "\n") {
		if strings.HasPrefix(l, prefix) {
			var v float64
			fmt.Sscan(strings.TrimPrefix(l, prefix), &v)
			return int64(v)
		}
	}
	return 0
}

func post(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// TestHASwitch hands the role over with POST /ha/switch while input
// arrives, several times: every input record is processed exactly once
// across the pods (no reprocessing under exactly-once), and the old active
// becomes a standby in place (the same process).
func TestHASwitch(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 2)
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 21)
	for i := 0; i < 5; i++ {
		time.Sleep(time.Second)
		// Wait until the other pod is a caught-up standby: the switch is
		// refused (409) until then.
		var code int
		var body map[string]any
		for j := 0; j < 100; j++ {
			if code, body = post(t, act.url("/ha/switch")); code == http.StatusAccepted {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code != http.StatusAccepted || body["command"] != "SWITCH" || body["commandOffset"] == nil {
			t.Fatalf("switch: %d %v", code, body)
		}
		start := time.Now()
		var rest []*instance
		for _, p := range pods {
			if p != act {
				rest = append(rest, p)
			}
		}
		next := activeOf(t, rest, 20*time.Second)
		t.Logf("switch %d: %s -> %s in %v", i, act.podID, next.podID, time.Since(start).Round(time.Millisecond))
		if act.proc.Exited() {
			t.Fatalf("the old active exited on switch instead of becoming a standby:\n%s", tail(act.proc.Log(), 20))
		}
		act = next
	}
	f.stopFeeding()
	want, lines := expectedCounts(t, c.Bootstrap())
	act.waitCounts(want, 60*time.Second)
	var processed int64
	for _, p := range pods {
		processed += p.recordsIn("words")
	}
	if processed != int64(lines) {
		t.Errorf("the pods processed %d input records in all; the input holds %d (a switch must reprocess nothing)", processed, lines)
	}
	for _, p := range pods {
		p.proc.Stop(30 * time.Second)
	}
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// TestHAZombie freezes the active past failure detection: a standby takes
// over; the old active, resumed, cannot commit and rejoins as a standby.
func TestHAZombie(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 2)
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods, 30*time.Second)
	other := pods[0]
	if other == act {
		other = pods[1]
	}
	f := startFeeder(t, c.Bootstrap(), 31)
	time.Sleep(time.Second)
	act.proc.Pause()
	if next := activeOf(t, []*instance{other}, 20*time.Second); next != other {
		t.Fatal("the standby did not take over")
	}
	time.Sleep(time.Second)
	act.proc.Resume()
	rejoinedAsStandby(t, "the resumed zombie", act, other, pods, 20*time.Second)
	f.stopFeeding()
	finishExactlyOnce(t, c.Bootstrap(), w.app, other, pods, 60*time.Second)
}

// TestHAAtLeastOnce kills the active of an at-least-once application:
// nothing is lost, and what is counted twice is bounded by what arrives
// in one commit interval per kill.
func TestHAAtLeastOnce(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	const interval = 500 * time.Millisecond
	w, pods := haPods(t, c.Bootstrap(), 2, "STOATFLOW__PROCESSING_GUARANTEE=at-least-once",
		fmt.Sprintf("STOATFLOW__COMMIT_INTERVAL_MS=%d", interval.Milliseconds()))
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 41)
	start := time.Now()
	const kills = 5
	for i := 0; i < kills; i++ {
		time.Sleep(1500 * time.Millisecond)
		act.proc.Kill()
		var rest []*instance
		for _, p := range pods {
			if p != act {
				rest = append(rest, p)
			}
		}
		next := activeOf(t, rest, 20*time.Second)
		act.start()
		act = next
	}
	f.stopFeeding()
	elapsed := time.Since(start)
	want, _ := expectedCounts(t, c.Bootstrap())
	var total int64
	for _, n := range want {
		total += n
	}
	// Wait until every word has at least its count.
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]int64
	for {
		got = act.storeContents()
		short := 0
		for w, n := range want {
			if got[w] < n {
				short++
			}
		}
		if got != nil && short == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("at-least-once lost updates: %s", diffCounts(got, want))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var dup int64
	for w, n := range want {
		dup += got[w] - n
	}
	perInterval := float64(total) / elapsed.Seconds() * interval.Seconds()
	t.Logf("%d words counted %d extra times over %d kills (%.0f words arrive per commit interval)", total, dup, kills, perInterval)
	if float64(dup) > kills*2*perInterval {
		t.Errorf("%d duplicates over %d kills: more than a commit interval's worth (%.0f) each", dup, kills, perInterval)
	}
	for _, p := range pods {
		p.proc.Stop(30 * time.Second)
	}
	_ = w
}

// TestHARollingRestart restarts all three pods one by one, each after
// /health/ready of the previous one says 200, standbys first and the
// active last, as a StatefulSet's rolling update does: at every moment
// there is an active, and the output stays exactly-once.
func TestHARollingRestart(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 3)
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	activeOf(t, pods, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 51)
	ready := func(p *instance) bool {
		resp, err := http.Get(p.url("/health/ready"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	waitReady := func(p *instance) {
		deadline := time.Now().Add(30 * time.Second)
		for !ready(p) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never became ready:\n%s", p.podID, tail(p.proc.Log(), 20))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, p := range pods {
		waitReady(p)
	}
	// Watch for a moment without an active.
	stop := make(chan struct{})
	gaps := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		var since time.Time
		for {
			select {
			case <-stop:
				gaps <- worst
				return
			case <-time.After(20 * time.Millisecond):
			}
			any := false
			for _, p := range pods {
				if s, ok := p.haStatus(); ok && s.SelfRole == "ACTIVE" {
					any = true
				}
			}
			if any {
				since = time.Time{}
			} else if since.IsZero() {
				since = time.Now()
			} else if d := time.Since(since); d > worst {
				worst = d
			}
		}
	}()
	order := append([]*instance{}, pods...)
	act := activeOf(t, pods, 10*time.Second)
	for i, p := range order {
		if p == act {
			order = append(append(order[:i:i], order[i+1:]...), act)
			break
		}
	}
	for _, p := range order {
		if !p.proc.Stop(30 * time.Second) {
			t.Fatalf("%s did not stop on SIGTERM", p.podID)
		}
		p.start()
		waitReady(p)
		t.Logf("%s restarted and ready", p.podID)
	}
	close(stop)
	worst := <-gaps
	t.Logf("longest time without an active: %v", worst)
	if worst > 3*time.Second {
		t.Errorf("the roll left the application without an active for %v", worst)
	}
	f.stopFeeding()
	act = activeOf(t, pods, 10*time.Second)
	finishExactlyOnce(t, c.Bootstrap(), w.app, act, pods, 60*time.Second)
}

// TestHALaggingStandby throttles the only standby's applier so it falls
// behind beyond acceptable-recovery-lag, then kills the active: the
// standby waits promotion-grace-ms (no eligible candidate), promotes,
// drains what it missed before processing, and the output stays
// exactly-once.
func TestHALaggingStandby(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 2, "STOATFLOW__HA__ACCEPTABLE_RECOVERY_LAG=5", "STOATFLOW__HA__PROMOTION_GRACE_MS=1500")
	pods[0].start()
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods[:1], 30*time.Second)
	slow := pods[1]
	slow.start("STOATFLOW_TEST_APPLY_DELAY_MS=1000")
	f := startFeeder(t, c.Bootstrap(), 61)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(slow.url("/ha/status"))
		if err == nil {
			var s struct {
				Lag int64 `json:"replicationLagRecords"`
			}
			json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if s.Lag > 300 {
				t.Logf("the standby lags %d records", s.Lag)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the throttled standby never fell behind")
		}
		time.Sleep(100 * time.Millisecond)
	}
	act.proc.Kill()
	killed := time.Now()
	if activeOf(t, []*instance{slow}, 30*time.Second) != slow {
		t.Fatal("no takeover")
	}
	took := time.Since(killed)
	if took < 1500*time.Millisecond {
		t.Errorf("a standby beyond acceptable-recovery-lag promoted after %v, before promotion-grace-ms", took)
	}
	if n := replayed(slow.proc.Log()); n == 0 {
		t.Errorf("the lagging standby drained nothing before processing:\n%s", tail(slow.proc.Log(), 20))
	} else {
		t.Logf("promoted after %v, draining %d changelog records first", took.Round(time.Millisecond), n)
	}
	f.stopFeeding()
	want, _ := expectedCounts(t, c.Bootstrap())
	slow.waitCounts(want, 60*time.Second)
	slow.proc.Stop(30 * time.Second)
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// TestHAConflictAndFloor: a switch without a caught-up standby is refused
// with 409 unless forced; with two standbys wanted, a standby is ready
// only while another caught-up standby remains.
func TestHAConflictAndFloor(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	_, pods := haPods(t, c.Bootstrap(), 3)
	pods[0].start()
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods[:1], 30*time.Second)
	if code, body := post(t, act.url("/ha/switch")); code != http.StatusConflict {
		t.Fatalf("switch with no standby: %d %v, want 409", code, body)
	}
	if code, _ := post(t, act.url("/ha/promote?pod=nobody")); code != http.StatusConflict {
		t.Fatalf("promote of an unknown pod: %d, want 409", code)
	}
	if code, _ := post(t, act.url("/ha/promote")); code != http.StatusBadRequest {
		t.Fatalf("promote without ?pod: %d, want 400", code)
	}
	pods[1].start()
	pods[2].start()
	ready := func(p *instance) bool {
		resp, err := http.Get(p.url("/health/ready"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ready(pods[1]) || !ready(pods[2]) {
		if time.Now().After(deadline) {
			t.Fatal("the standbys never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pods[2].proc.Kill()
	deadline = time.Now().Add(10 * time.Second)
	for ready(pods[1]) {
		if time.Now().After(deadline) {
			t.Fatal("the last caught-up standby still says ready: rolling it would leave no warm spare")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(pods[1].url("/health/live"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("liveness of a standby held back by the floor: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := post(t, act.url("/ha/switch?force=true")); code != http.StatusAccepted || body["force"] != true {
		t.Fatalf("forced switch: %d %v", code, body)
	}
	// Wait for the successor itself: right after the POST the old active
	// may not have read the command yet and still be the only active.
	activeOf(t, pods[1:2], 20*time.Second)
	if a := activeOf(t, pods[:2], 10*time.Second); a != pods[1] {
		t.Fatalf("after the forced switch %s is active", a.podID)
	}
}

// TestHABrokerFailoverDuringPromotion kills the replication group's
// leader and the active pod at the same moment.
func TestHABrokerFailoverDuringPromotion(t *testing.T) {
	c := testenv.MoonMQ(t, 3)
	w, pods := haPods(t, c.Bootstrap(), 2)
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	act := activeOf(t, pods, 30*time.Second)
	f := startFeeder(t, c.Bootstrap(), 71)
	for round := 0; round < 2; round++ {
		time.Sleep(2 * time.Second)
		leader := c.Leader(20 * time.Second)
		act.proc.Kill()
		c.Kill(leader)
		var other *instance
		for _, p := range pods {
			if p != act {
				other = p
			}
		}
		if activeOf(t, []*instance{other}, 40*time.Second) != other {
			t.Fatal("no takeover")
		}
		c.Start(leader)
		act.start()
		act = other
		c.WaitHealthy(60 * time.Second)
	}
	f.stopFeeding()
	finishExactlyOnce(t, c.Bootstrap(), w.app, act, pods, 90*time.Second)
}

// TestHARestartRequired adds partitions to the source topic: the pods say
// a restart is required (status, metric) and fail liveness, so Kubernetes
// recycles them.
func TestHARestartRequired(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	_, pods := haPods(t, c.Bootstrap(), 2, "STOATFLOW_TEST_PARTITION_WATCH_MS=200")
	for _, p := range pods {
		p.start()
	}
	waitTopic(t, c.Bootstrap(), "words")
	activeOf(t, pods, 30*time.Second)
	adm := kadm.NewClient(client(t, c.Bootstrap()))
	if _, err := adm.CreatePartitions(context.Background(), 5, "words"); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get(p.url("/health/live"))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stays live after the source gained partitions", p.podID)
			}
			time.Sleep(100 * time.Millisecond)
		}
		var s struct {
			RestartRequired *string `json:"restartRequired"`
		}
		resp, err := http.Get(p.url("/ha/status"))
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if s.RestartRequired == nil || !strings.Contains(*s.RestartRequired, "words") {
			t.Errorf("%s: restartRequired %v", p.podID, s.RestartRequired)
		}
		if !strings.Contains(p.metricsText(), "stoatflow_ha_restart_required 1") {
			t.Errorf("%s: stoatflow_ha_restart_required is not 1", p.podID)
		}
	}
}

// TestHACoordinationTopicMustHaveOnePartition: a pre-created coordination
// topic with two partitions stops the start with an error that gives the
// spec to create it with.
func TestHACoordinationTopicMustHaveOnePartition(t *testing.T) {
	c := testenv.MoonMQ(t, 1)
	w, pods := haPods(t, c.Bootstrap(), 2)
	adm := kadm.NewClient(client(t, c.Bootstrap()))
	if _, err := adm.CreateTopic(context.Background(), 2, -1, nil, "__stoatflow_"+w.app+"_ha"); err != nil {
		t.Fatal(err)
	}
	p := pods[0].start()
	exited, err := p.Wait(60 * time.Second)
	if !exited || err == nil {
		t.Fatalf("started with a two-partition coordination topic (exited %v, %v)", exited, err)
	}
	log := p.Log()
	if !strings.Contains(log, `"level":"ERROR"`) || !strings.Contains(log, "exactly one partition") || !strings.Contains(log, "--partitions 1 --config cleanup.policy=compact") {
		t.Errorf("the refusal does not give the spec at ERROR:\n%s", tail(log, 10))
	}
}

// finishExactlyOnce waits until the active's store holds the counts of
// everything the input holds, stops every pod, and checks exactly-once.
func finishExactlyOnce(t *testing.T, bootstrap, app string, act *instance, pods []*instance, within time.Duration) {
	t.Helper()
	want, _ := expectedCounts(t, bootstrap)
	act.waitCounts(want, within)
	for _, p := range pods {
		p.proc.Stop(30 * time.Second)
	}
	checkExactlyOnce(t, bootstrap, app, want)
}
