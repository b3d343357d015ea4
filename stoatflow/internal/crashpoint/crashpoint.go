// Package crashpoint holds the faults the tests inject into an application
// process. It lets the kill tests end the process with SIGKILL at a
// named step of the commit and checkpoint protocol, so that every step is
// shown to be a safe place to die, slow a standby down (ApplyDelay), fail
// a commit (Fail) and route the broker connections through a proxy
// (BrokerVia).
//
// It is off unless the environment variable STOATFLOW_CRASHPOINT names a
// point, as "<point>" (the first time it is reached) or "<point>@<n>" (the
// n-th time). The check on the hot path is one atomic load.
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The points, in the order a commit reaches them.
const (
	BeforeProduce = "before-produce" // changelog records not yet sent
	BeforeCommit  = "before-commit"  // everything sent and flushed, offsets added, transaction not ended
	AfterCommit   = "after-commit"   // transaction committed, local stores not yet updated
	MidCheckpoint = "mid-checkpoint" // a flush of the local stores under way
	MidRestore    = "mid-restore"    // part of a changelog restored
)

// All lists every point.
var All = []string{BeforeProduce, BeforeCommit, AfterCommit, MidCheckpoint, MidRestore}

var (
	armed atomic.Bool
	point string
	nth   int64
	hits  atomic.Int64
)

func init() {
	v := os.Getenv("STOATFLOW_CRASHPOINT")
	if v == "" {
		return
	}
	point, nth = v, 1
	if p, n, ok := strings.Cut(v, "@"); ok {
		k, err := strconv.ParseInt(n, 10, 64)
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "STOATFLOW_CRASHPOINT=%s: the count after @ must be a positive number\n", v)
			os.Exit(2)
		}
		point, nth = p, k
	}
	armed.Store(true)
}

// Hit kills the process if it is the armed point's n-th arrival.
func Hit(name string) {
	if !armed.Load() || name != point {
		return
	}
	if hits.Add(1) == nth {
		fmt.Fprintf(os.Stderr, "crashpoint %s@%d: SIGKILL\n", name, nth)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// ApplyDelay is how long a standby's changelog applier sleeps after each
// fetch: STOATFLOW_TEST_APPLY_DELAY_MS, for the test of a standby that
// falls behind. Zero unless set.
func ApplyDelay() time.Duration { return applyDelay }

var applyDelay = func() time.Duration {
	ms, _ := strconv.Atoi(os.Getenv("STOATFLOW_TEST_APPLY_DELAY_MS"))
	return time.Duration(ms) * time.Millisecond
}()

// Fail returns an error every n-th time the point named by
// STOATFLOW_FAILPOINT ("<point>@<n>") is reached, so the tests drive the
// abort path (a commit that fails without the process dying).
func Fail(name string) error {
	if failEvery == 0 || name != failPoint {
		return nil
	}
	if failHits.Add(1)%failEvery == 0 {
		return fmt.Errorf("failpoint %s: injected failure", name)
	}
	return nil
}

var (
	failPoint string
	failEvery int64
	failHits  atomic.Int64
)

func init() {
	v := os.Getenv("STOATFLOW_FAILPOINT")
	if v == "" {
		return
	}
	p, n, _ := strings.Cut(v, "@")
	k, err := strconv.ParseInt(n, 10, 64)
	if err != nil || k < 1 {
		fmt.Fprintf(os.Stderr, "STOATFLOW_FAILPOINT=%s: want <point>@<every n-th>\n", v)
		os.Exit(2)
	}
	failPoint, failEvery = p, k
}

// BrokerVia maps broker addresses to the addresses this process dials
// instead: STOATFLOW_TEST_BROKER_VIA="<broker host:port>=<proxy host:port>,...".
// The network-cut test routes one pod through a proxy it can cut while
// the other pods still reach the broker directly; a broker advertises one
// address to every client, so only the dialer can tell the pods apart.
// Nil unless set.
func BrokerVia() map[string]string { return brokerVia }

var brokerVia = func() map[string]string {
	v := os.Getenv("STOATFLOW_TEST_BROKER_VIA")
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		from, to, ok := strings.Cut(pair, "=")
		if !ok || from == "" || to == "" {
			fmt.Fprintf(os.Stderr, "STOATFLOW_TEST_BROKER_VIA=%s: want <broker host:port>=<proxy host:port>,...\n", v)
			os.Exit(2)
		}
		m[from] = to
	}
	return m
}()
