package test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

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
	const failovers = 10
	for i := 0; i < failovers; i++ {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		act.proc.Kill()
		killed := time.Now()
		var rest []*instance
		for _, p := range pods {
			if p != act {
				rest = append(rest, p)
			}
		}
		next := activeOf(t, rest, 20*time.Second)
		t.Logf("failover %d: %s killed, %s active after %v", i, act.podID, next.podID, time.Since(killed).Round(time.Millisecond))
		act.start()
		act = next
	}
	f.stopFeeding()
	want, _ := expectedCounts(t, c.Bootstrap())
	act.waitCounts(want, 60*time.Second)
	for _, p := range pods {
		p.proc.Stop(30 * time.Second)
	}
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}

// recordsIn sums stoatflow_records_in_total{topic} on a pod's /metrics.
func (in *instance) recordsIn(topic string) int64 {
	resp, err := http.Get(in.url("/metrics"))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	prefix := fmt.Sprintf(`stoatflow_records_in_total{topic="%s"} `, topic)
	for _, l := range strings.Split(sb.String(), "\n") {
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, ok := act.haStatus()
		if ok && s.SelfRole == "STANDBY" {
			break
		}
		if time.Now().After(deadline) || act.proc.Exited() {
			t.Fatalf("the resumed zombie did not become a standby (%+v):\n%s", s, tail(act.proc.Log(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := activeOf(t, pods, 10*time.Second); a != other {
		t.Fatalf("%s is active after the zombie came back, want %s", a.podID, other.podID)
	}
	f.stopFeeding()
	want, _ := expectedCounts(t, c.Bootstrap())
	other.waitCounts(want, 60*time.Second)
	for _, p := range pods {
		p.proc.Stop(30 * time.Second)
	}
	checkExactlyOnce(t, c.Bootstrap(), w.app, want)
}
