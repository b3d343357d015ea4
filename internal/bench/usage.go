package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BrokerUsage is what the broker processes (--broker-pids) spent on a
// case's produce phase, read from Linux's /proc. It is the footprint side
// of a comparison: CPU per acknowledged record holds on any machine, where
// records per second drift with what else runs.
type BrokerUsage struct {
	// Processes is how many broker processes were measured (3 for a
	// 3-node group).
	Processes int `json:"processes"`
	// CPUSeconds is user plus system time of all of them during the
	// produce phase.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUSecondsPerMillion is CPUSeconds per million acknowledged
	// records.
	CPUSecondsPerMillion float64 `json:"cpu_seconds_per_million"`
	// RSSStartMB is their resident memory, summed, as the case began.
	RSSStartMB float64 `json:"rss_start_mb"`
	// RSSPeakMB is the largest sum of their resident memory seen while
	// producing (sampled every usageSampleInterval).
	RSSPeakMB float64 `json:"rss_peak_mb"`
}

// usageSampleInterval is how often resident memory is sampled.
const usageSampleInterval = 100 * time.Millisecond

// userHZ is the unit of the CPU times in /proc/PID/stat: Linux fixes the
// user-visible clock tick at 100 Hz on every architecture it runs on.
const userHZ = 100

// ProcCPU returns pid's user plus system CPU time (Linux).
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// ProcRSS returns pid's resident set size in bytes (Linux).
func ProcRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/statm: %q", pid, data)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/statm: %v", pid, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// usageMeter measures the broker processes over one produce phase. Its
// sampling goroutine is owned by the meter: stop ends it.
type usageMeter struct {
	pids     []int
	cpuStart time.Duration
	rssStart int64

	mu   sync.Mutex
	peak int64
	err  error

	done    chan struct{}
	stopped chan struct{}
}

// startUsage starts measuring pids; nil when there are none.
func startUsage(pids []int) (*usageMeter, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	m := &usageMeter{pids: pids, done: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	if m.cpuStart, m.rssStart, err = m.read(); err != nil {
		return nil, err
	}
	m.peak = m.rssStart
	go m.sample()
	return m, nil
}

func (m *usageMeter) read() (cpu time.Duration, rss int64, err error) {
	for _, pid := range m.pids {
		c, err := ProcCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		r, err := ProcRSS(pid)
		if err != nil {
			return 0, 0, err
		}
		cpu += c
		rss += r
	}
	return cpu, rss, nil
}

func (m *usageMeter) sample() {
	defer close(m.stopped)
	t := time.NewTicker(usageSampleInterval)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		_, rss, err := m.read()
		m.mu.Lock()
		if err != nil && m.err == nil {
			m.err = err
		}
		m.peak = max(m.peak, rss)
		m.mu.Unlock()
	}
}

// stop ends the measurement of a phase that acknowledged records.
func (m *usageMeter) stop(records int64) (BrokerUsage, error) {
	close(m.done)
	<-m.stopped
	cpu, rss, err := m.read()
	if err == nil {
		err = m.err
	}
	if err != nil {
		return BrokerUsage{}, err
	}
	u := BrokerUsage{
		Processes:  len(m.pids),
		CPUSeconds: (cpu - m.cpuStart).Seconds(),
		RSSStartMB: float64(m.rssStart) / 1e6,
		RSSPeakMB:  float64(max(m.peak, rss)) / 1e6,
	}
	if records > 0 {
		u.CPUSecondsPerMillion = u.CPUSeconds / (float64(records) / 1e6)
	}
	return u, nil
}
