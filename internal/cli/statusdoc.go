package cli

import "github.com/moonmq/moonmq/internal/status"

// The documents the CLI reads (GET /replication/status, /stats) are the
// wire types of internal/status, the ones the broker writes; `--json`
// prints whatever the broker sends, fields those types do not know
// included.

// LogRange is a leader partition's log start and end.
type LogRange struct {
	Start, End int64
}

// logRanges indexes s's partitions by "topic-partition", the key the status
// object uses for follower positions.
func logRanges(s status.Stats) map[string]LogRange {
	out := make(map[string]LogRange, len(s.Partitions))
	for _, p := range s.Partitions {
		out[partKey(p.Topic, p.Partition)] = LogRange{Start: p.LogStartOffset, End: p.LogEndOffset}
	}
	return out
}
