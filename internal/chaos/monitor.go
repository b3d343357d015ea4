package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// sample is what the monitor saw of one group at one moment: the serving
// leader (0 if none) and its epoch.
type sample struct {
	At     time.Duration
	Group  int // 0 for g1
	Leader int
	Epoch  int32
}

// Failover is one change of serving leader (or epoch) during a run.
type Failover struct {
	// Group is the replication group that failed over (0 for g1).
	Group int
	// At is when the new leader was first seen serving.
	At time.Duration
	// From and To are the old and new leaders (0: none was seen), with
	// their epochs.
	From, To           int
	FromEpoch, ToEpoch int32
	// Leaderless is how long no replica was seen serving before To.
	Leaderless time.Duration
	// SinceFault is how long after the start of the fault that hit the old
	// leader (or the whole group) To began serving; 0 if no fault did.
	SinceFault time.Duration
	// Cause is that fault, if any.
	Cause string
}

// monitor polls every running replica's status directly (never through
// the proxies) a few times a second, to draw the leader timeline and time
// failovers, and prints the progress line.
type monitor struct {
	c      *testcluster.Cluster
	t0     time.Time
	groups int
	// topics are the workload's topics, whose owners a cluster run
	// watches (ownerClaim).
	topics []string

	mu      sync.Mutex
	samples []sample
	claims  []ownerClaim
	stop    chan struct{}
	done    chan struct{}
}

// ownerClaim is one sighting of a broker serving a partition of the
// workload: its group's leader, with the partition its group's in its
// copy of the metadata and not fenced, stamping appends with Epoch.
type ownerClaim struct {
	At        time.Duration
	Topic     string
	Partition int32
	Epoch     int32
	Group     int
	Replica   int
}

func newMonitor(c *testcluster.Cluster, t0 time.Time, groups int, topics []string) *monitor {
	return &monitor{c: c, t0: t0, groups: max(groups, 1), topics: topics, stop: make(chan struct{}), done: make(chan struct{})}
}

// claimsNow asks every running replica that says it serves as its
// group's leader (a zombie resumed after its group moved on included)
// which workload partitions it serves, at which epoch.
func (m *monitor) claimsNow() []ownerClaim {
	var out []ownerClaim
	for _, r := range m.c.Up() {
		st, err := r.Status()
		if err != nil || !testcluster.Serving(st) {
			continue
		}
		stats, err := r.Stats()
		if err != nil {
			continue
		}
		at := time.Since(m.t0)
		for _, p := range stats.Partitions {
			if p.Owner == nil || p.Owner.ServingEpoch == 0 || !slices.Contains(m.topics, p.Topic) {
				continue
			}
			out = append(out, ownerClaim{At: at, Topic: p.Topic, Partition: p.Partition, Epoch: p.Owner.ServingEpoch, Group: r.Group, Replica: r.ID})
		}
	}
	return out
}

// run samples every group until close; progress gets the latest sample
// of each group every so often.
func (m *monitor) run(every time.Duration, progress func([]sample)) {
	defer close(m.done)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		var now []sample
		for g := range m.groups {
			r, st := m.c.ServingLeaderOf(g)
			s := sample{At: time.Since(m.t0), Group: g}
			if r != nil {
				s.Leader, s.Epoch = r.ID, st.Epoch
			}
			now = append(now, s)
		}
		var claims []ownerClaim
		if m.groups > 1 {
			claims = m.claimsNow()
		}
		m.mu.Lock()
		m.samples = append(m.samples, now...)
		m.claims = append(m.claims, claims...)
		m.mu.Unlock()
		if every > 0 && time.Since(last) >= every {
			last = time.Now()
			progress(now)
		}
	}
}

func (m *monitor) close() {
	close(m.stop)
	<-m.done
}

func (m *monitor) claimsCopy() []ownerClaim {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ownerClaim(nil), m.claims...)
}

func (m *monitor) samplesCopy() []sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]sample(nil), m.samples...)
}

// failovers derives each group's leader changes from the samples, and
// relates each to the latest fault that hit the old leader (or every
// replica) before it; they come ordered by time.
func failovers(samples []sample, events []Event) []Failover {
	groups := 0
	for _, s := range samples {
		groups = max(groups, s.Group+1)
	}
	var out []Failover
	for g := range groups {
		out = append(out, groupFailovers(g, samples, events)...)
	}
	slices.SortStableFunc(out, func(a, b Failover) int { return cmp.Compare(a.At, b.At) })
	return out
}

func groupFailovers(g int, samples []sample, events []Event) []Failover {
	var out []Failover
	var cur sample
	var lastServing time.Duration
	have := false
	for _, s := range samples {
		if s.Leader == 0 || s.Group != g {
			continue
		}
		if have && s.Leader == cur.Leader && s.Epoch == cur.Epoch {
			lastServing = s.At
			continue
		}
		if have {
			f := Failover{Group: g, At: s.At, From: cur.Leader, FromEpoch: cur.Epoch, To: s.Leader, ToEpoch: s.Epoch,
				Leaderless: s.At - lastServing}
			// The cause is the first fault on the old leader (or on every
			// replica) that was going on when it was last seen serving.
			for _, e := range events {
				if e.Start > lastServing+time.Second || e.End < lastServing-time.Second {
					continue
				}
				hit := (e.Kind == KillAll || e.Kind == RestartAll || e.Kind == RollingRestart) && len(e.Targets) == 0
				for _, id := range e.Targets {
					hit = hit || id == cur.Leader
				}
				if hit {
					f.SinceFault, f.Cause = s.At-e.Start, fmt.Sprintf("%s %v at %.1fs", e.Kind, e.Targets, e.Start.Seconds())
					break
				}
			}
			out = append(out, f)
		}
		cur, have, lastServing = s, true, s.At
	}
	return out
}
