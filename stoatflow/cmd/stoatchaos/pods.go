package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// pod is one place an instance of the word count runs from: a state
// directory and an HTTP port, kept across its restarts.
type pod struct {
	r        *runner
	id       string
	stateDir string
	port     int
	proc     *testenv.Process // the latest run, nil before the first
	runs     int
	logDir   string // of the latest run
	// expectExit is set when the harness ended the run (or started it to
	// die at a crash point); any other exit is an anomaly.
	expectExit bool
	paused     bool
	// proxies carry every connection of the pod to the brokers, one per
	// broker address, when the run has cut-active faults.
	proxies []*testenv.CutProxy
}

// checkpointRecords makes checkpoints frequent, so that dying in the
// middle of one (the mid-checkpoint crash point) is reached.
const checkpointRecords = 500

func (p *pod) start(extra ...string) {
	r := p.r
	env := []string{
		"STOATFLOW__APPLICATION_ID=" + r.app,
		"STOATFLOW__BOOTSTRAP_SERVERS=" + r.cluster.Bootstrap(),
		"STOATFLOW__STATE__DIR=" + p.stateDir,
		"STOATFLOW__HTTP__PORT=" + strconv.Itoa(p.port),
		"STOATFLOW__HTTP__HOST=127.0.0.1",
		fmt.Sprintf("STOATFLOW__STATE__SEGMENT_CHECKPOINT_RECORDS=%d", checkpointRecords),
	}
	if r.ha() {
		n := r.cfg.Pods
		env = append(env, "STOATFLOW__HA__MODE=active-standby", "STOATFLOW__HA__POD_ID="+p.id,
			fmt.Sprintf("STOATFLOW__HA__DESIRED_STANDBYS=%d", n-1), fmt.Sprintf("STOATFLOW__HA__MAX_STANDBYS=%d", n))
	}
	if r.cutsNetwork() {
		if p.proxies == nil {
			for _, a := range r.cluster.Addrs() {
				p.proxies = append(p.proxies, testenv.StartCutProxy(r.tb, a))
			}
		}
		var via []string
		for i, a := range r.cluster.Addrs() {
			via = append(via, a+"="+p.proxies[i].Addr())
		}
		env = append(env, "STOATFLOW_TEST_BROKER_VIA="+strings.Join(via, ","))
	}
	p.runs++
	r.tb.name(fmt.Sprintf("%s-run%03d", p.id, p.runs))
	p.proc = testenv.StartProcess(r.tb, r.bin, []string{"--partitions", "3"}, append(env, extra...))
	p.logDir = r.tb.lastDir()
	p.expectExit, p.paused = false, false
}

// cut stalls the pod's network to every broker; heal lets it through.
func (p *pod) cut() {
	for _, x := range p.proxies {
		x.Cut()
	}
}

func (p *pod) heal() {
	for _, x := range p.proxies {
		x.Heal()
	}
}

func (p *pod) running() bool { return p.proc != nil && !p.proc.Exited() }

// kill ends the pod's run with SIGKILL.
func (p *pod) kill() {
	p.expectExit = true
	p.proc.Kill()
	p.paused = false
}

// stop ends the pod's run with SIGTERM: nil if it ended within 30 s with
// exit status 0.
func (p *pod) stop() error {
	p.expectExit = true
	p.paused = false
	if !p.proc.Stop(30 * time.Second) {
		return fmt.Errorf("%s did not stop within 30s of SIGTERM (killed):\n%s", p.id, p.tail(20))
	}
	if _, err := p.proc.Wait(0); err != nil {
		return fmt.Errorf("%s ended on SIGTERM with %v:\n%s", p.id, err, p.tail(20))
	}
	return nil
}

func (p *pod) pause() {
	p.proc.Pause()
	p.paused = true
}

func (p *pod) resume() {
	p.proc.Resume()
	p.paused = false
}

func (p *pod) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path) }

func (p *pod) tail(n int) string {
	if p.proc == nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(p.proc.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// haStatus is the part of GET /ha/status the harness reads.
type haStatus struct {
	SelfRole   string `json:"selfRole"`
	SelfState  string `json:"selfState"`
	TokenEpoch int64  `json:"tokenEpoch"`
	Holder     string `json:"tokenHolder"`
	Ready      int    `json:"readyStandbyCount"`
	Lag        int64  `json:"replicationLagRecords"`
}

// statusClient bounds every status poll: a paused pod's socket accepts
// and never answers.
var statusClient = &http.Client{Timeout: 2 * time.Second}

func (p *pod) status() (haStatus, bool) {
	var s haStatus
	if !p.running() || p.paused {
		return s, false
	}
	resp, err := statusClient.Get(p.url("/ha/status"))
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&s) == nil
}

func (s haStatus) active() bool { return s.SelfRole == "ACTIVE" && s.SelfState == "ACTIVE" }

// ready is GET /health/ready answering 200.
func (p *pod) ready() bool {
	if !p.running() || p.paused {
		return false
	}
	resp, err := statusClient.Get(p.url("/health/ready"))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// post sends POST path to the pod: the status code and the answer.
func (p *pod) post(path string) (int, string) {
	resp, err := statusClient.Post(p.url(path), "", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, strings.TrimSpace(b.String())
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

var vocabulary = func() []string {
	var w []string
	for i := 0; i < 60; i++ {
		w = append(w, fmt.Sprintf("w%02d", i))
	}
	return append(w, "Hello", "WORLD", "hello", "world")
}()

func line(rng *rand.Rand) string {
	ws := make([]string, 1+rng.IntN(7))
	for i := range ws {
		ws[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return strings.Join(ws, "  ")
}

// feeder produces lines to "words" at a steady rate, in batches of ten,
// while it runs. A batch that fails is not retried: what counts is what
// the topic holds.
type feeder struct {
	cl   *kgo.Client
	rate int
	rng  *rand.Rand

	mu     sync.Mutex
	stop   chan struct{}
	done   sync.WaitGroup
	acked  int
	failed int
}

func newFeeder(bootstrap string, rate int, seed uint64) (*feeder, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.RecordRetries(20))
	if err != nil {
		return nil, err
	}
	return &feeder{cl: cl, rate: rate, rng: rand.New(rand.NewPCG(seed, 7))}, nil
}

const batch = 10

func (f *feeder) resume() {
	if f.stop != nil {
		return
	}
	f.stop = make(chan struct{})
	stop := f.stop
	every := time.Second * batch / time.Duration(max(f.rate, 1))
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, batch)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: "words", Key: []byte(strconv.Itoa(f.rng.IntN(1000))), Value: []byte(line(f.rng))}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := f.cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			f.mu.Lock()
			if err == nil {
				f.acked += len(recs)
			} else {
				f.failed += len(recs)
			}
			f.mu.Unlock()
		}
	}()
}

// pause stops producing and returns once no produce is in flight.
func (f *feeder) pause() {
	if f.stop == nil {
		return
	}
	close(f.stop)
	f.done.Wait()
	f.stop = nil
}

func (f *feeder) counts() (acked, failed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked, f.failed
}

func (f *feeder) close() {
	f.pause()
	f.cl.Close()
}
