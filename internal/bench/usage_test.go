//go:build linux

package bench

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestUsageMeterAgreesWithRusage measures this test process burning
// 300 ms of CPU and checks /proc's account against getrusage's, which the
// kernel keeps from the same counters (to the 10 ms tick of /proc).
func TestUsageMeterAgreesWithRusage(t *testing.T) {
	m, err := startUsage([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	start := rusageCPU(t)
	buf := make([]byte, 64<<20) // resident once touched
	for i := 0; rusageCPU(t)-start < 300*time.Millisecond; i++ {
		buf[(i*4096)%len(buf)]++
	}
	burnt := rusageCPU(t) - start
	u, err := m.stop(2_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if d := u.CPUSeconds - burnt.Seconds(); d < -0.05 || d > 0.2 {
		t.Fatalf("meter says %.3f s of CPU, getrusage %.3f s", u.CPUSeconds, burnt.Seconds())
	}
	if u.CPUSecondsPerMillion != u.CPUSeconds/2 {
		t.Fatalf("per million = %.3f for %.3f s over 2M records", u.CPUSecondsPerMillion, u.CPUSeconds)
	}
	if u.Processes != 1 || u.RSSPeakMB < 64 || u.RSSPeakMB < u.RSSStartMB {
		t.Fatalf("usage %+v: want one process, a peak of at least the 64 MB touched", u)
	}
}

func TestBrokerPIDsValidated(t *testing.T) {
	if _, err := parseArgs([]string{"--broker-pids", "x"}, os.Stderr); err == nil {
		t.Fatal("a non-numeric pid was accepted")
	}
	if _, err := parseArgs([]string{"--broker-pids", "999999999"}, os.Stderr); err == nil {
		t.Fatal("a process that does not exist was accepted")
	}
	cfg, err := parseArgs([]string{"--broker-pids", "1," + strconv.Itoa(os.Getpid())}, os.Stderr)
	if err != nil || len(cfg.BrokerPIDs) != 2 {
		t.Fatalf("%v %v", cfg, err)
	}
}
