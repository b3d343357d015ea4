package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// newSegmentPool makes the descriptor pool every partition's rolled
// segments share (Server.MaxOpenSegmentFiles) and exports its counters.
func (b *Broker) newSegmentPool() {
	limit := b.cfg.MaxOpenSegmentFiles
	nofile, known := openFileLimit()
	if limit == 0 {
		if !known {
			nofile = 1024
		}
		limit = config.DefaultMaxOpenSegmentFiles(nofile)
	}
	b.segFiles = vfs.NewPool(b.fs, limit)
	// Each partition's active segment holds one descriptor more.
	b.log.Info("rolled segment files held open at most", "max_open_segment_files", limit, "open_file_limit", nofile)
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	p := b.segFiles
	b.stats.reg.MustRegister(
		gauge("moonmq_segment_files_open", "Segment log files open: every partition's active segment, and rolled segments' files in the pool.",
			func() float64 { return float64(p.Stats().Open) }),
		gauge("moonmq_segment_files_limit", "Most rolled segments' files held open at once (Server.MaxOpenSegmentFiles).",
			func() float64 { return float64(p.Stats().Limit) }),
		counter("moonmq_segment_file_opens_total", "Rolled segments' files opened to be read.",
			func() float64 { return float64(p.Stats().Opens) }),
		counter("moonmq_segment_file_evictions_total", "Rolled segments' files closed to make room for others.",
			func() float64 { return float64(p.Stats().Evictions) }),
		gauge("moonmq_segment_tails", "Active segments whose small appends wait in memory for one write (the next sync writes them; at most 512).",
			func() float64 { return float64(storage.Tails().Tails) }),
		gauge("moonmq_segment_tail_bytes", "Bytes of small appends waiting in memory for their write (at most 64 KiB a segment).",
			func() float64 { return float64(storage.Tails().Bytes) }),
	)
}

func (b *Broker) segmentFileStats() status.SegmentFiles {
	st := b.segFiles.Stats()
	tails := storage.Tails()
	return status.SegmentFiles{Open: st.Open, Limit: st.Limit, Opens: st.Opens, Evictions: st.Evictions,
		Tails: tails.Tails, TailBytes: tails.Bytes}
}
