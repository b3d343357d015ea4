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
