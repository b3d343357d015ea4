package broker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/moonmq/moonmq/internal/config"
)

// topicConfigSpec describes one topic-level config key the broker knows.
type topicConfigSpec struct {
	// def is the broker default, taken from the server config.
	def func(s *config.Server) string
	// check validates a value; nil accepts anything.
	check func(v string) error
	// list is true for comma-separated list configs (APPEND/SUBTRACT apply).
	list bool
	doc  string
}

func intRange(min, max int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if n < min || n > max {
			return fmt.Errorf("%d is out of range [%d, %d]", n, min, max)
		}
		return nil
	}
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, x := range vals {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("%q must be one of %s", v, strings.Join(vals, ", "))
	}
}

func constant(v string) func(*config.Server) string { return func(*config.Server) string { return v } }

// topicConfigs are the topic configs MoonMQ understands. Anything else is
// refused with INVALID_CONFIG rather than silently stored, so a user never
// believes a setting took effect when it did not.
var topicConfigs = map[string]topicConfigSpec{
	"retention.ms": {
		def:   func(s *config.Server) string { return strconv.FormatInt(s.RetentionMs, 10) },
		check: func(v string) error { return nonZero(intRange(-1, 1<<62)(v), v) },
		doc:   "Age after which a closed segment is deleted (-1: never).",
	},
	"retention.bytes": {
		def:   func(s *config.Server) string { return strconv.FormatInt(s.RetentionBytes, 10) },
		check: func(v string) error { return nonZero(intRange(-1, 1<<62)(v), v) },
		doc:   "Size per partition above which the oldest closed segments are deleted (-1: unlimited).",
	},
	"segment.bytes": {
		def:   func(s *config.Server) string { return strconv.FormatInt(s.SegmentBytes, 10) },
		check: intRange(1024, 1<<31-1),
		doc:   "Size at which the active segment is rolled.",
	},
	"max.message.bytes": {
		def:   func(s *config.Server) string { return strconv.Itoa(s.MaxMessageBytes) },
		check: intRange(64, 1<<30),
		doc:   "Largest record batch a produce may carry.",
	},
	"cleanup.policy": {
		def:   constant("delete"),
		check: checkCleanupPolicy,
		list:  true,
		doc:   "delete: retention removes old segments; compact: the cleaner keeps the latest record per key; compact,delete: both.",
	},
	"delete.retention.ms": {
		def:   constant("86400000"),
		check: intRange(0, 1<<62),
		doc:   "How long a tombstone survives compaction (compacted topics).",
	},
	"min.compaction.lag.ms": {
		def:   constant("0"),
		check: intRange(0, 1<<62),
		doc:   "Records younger than this are never compacted away.",
	},
	"compression.type": {
		def:   constant("producer"),
		check: oneOf("producer"),
		doc:   "Only producer: batches are stored as the producer compressed them, never recompressed.",
	},
	"message.timestamp.type": {
		def:   constant("CreateTime"),
		check: oneOf("CreateTime"),
		doc:   "Only CreateTime: the producer's timestamps are kept.",
	},
	"min.insync.replicas": {
		def:   func(s *config.Server) string { return strconv.Itoa(defaultMinISR(s)) },
		check: intRange(1, 5),
		doc:   "Smallest ISR an acks=all produce is accepted with (NOT_ENOUGH_REPLICAS otherwise); in failover mode also the smallest ISR the high watermark advances with. Default: a majority of the replication group in failover mode, else 1.",
	},
}

// defaultMinISR is min.insync.replicas for a topic that does not set it:
// in failover mode a majority of the group (2 of 3, 3 of 5), so that an
// acknowledged record is on enough replicas that any surviving majority
// holds it (KIP-966: the last replica standing must not be its only copy);
// elsewhere Kafka's default of 1.
func defaultMinISR(s *config.Server) int {
	r := s.Replication
	if r == nil || !r.Enabled || !r.Failover.Enabled {
		return 1
	}
	return (len(r.Peers)+1)/2 + 1
}

func nonZero(err error, v string) error {
	if err == nil && v == "0" {
		return fmt.Errorf("0 is not allowed (use -1 for unlimited)")
	}
	return err
}

func checkCleanupPolicy(v string) error {
	parts := strings.Split(v, ",")
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "delete" && p != "compact" {
			return fmt.Errorf("%q must be delete, compact or compact,delete", v)
		}
	}
	return nil
}

// validateTopicConfig checks one key/value pair.
func validateTopicConfig(key string, val *string) error {
	spec, ok := topicConfigs[key]
	if !ok {
		return fmt.Errorf("unknown or unsupported topic config %q", key)
	}
	if val == nil {
		return fmt.Errorf("config %q needs a value", key)
	}
	if spec.check != nil {
		if err := spec.check(*val); err != nil {
			return fmt.Errorf("config %q: %v", key, err)
		}
	}
	return nil
}

// topicSettings is the resolved configuration of a topic: overrides over
// broker defaults.
type topicSettings struct {
	retentionMs     int64
	retentionBytes  int64
	segmentBytes    int64
	maxMessageBytes int
	cleanupDelete   bool
	cleanupCompact  bool
	deleteRetention int64
	minCompactLag   int64
	minISR          int
}

func resolveSettings(s *config.Server, overrides map[string]string) topicSettings {
	get := func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return topicConfigs[k].def(s)
	}
	atoi := func(k string) int64 {
		n, _ := strconv.ParseInt(get(k), 10, 64)
		return n
	}
	ts := topicSettings{
		retentionMs:     atoi("retention.ms"),
		retentionBytes:  atoi("retention.bytes"),
		segmentBytes:    atoi("segment.bytes"),
		maxMessageBytes: int(atoi("max.message.bytes")),
	}
	for _, p := range strings.Split(get("cleanup.policy"), ",") {
		switch strings.TrimSpace(p) {
		case "delete":
			ts.cleanupDelete = true
		case "compact":
			ts.cleanupCompact = true
		}
	}
	ts.deleteRetention = atoi("delete.retention.ms")
	ts.minCompactLag = atoi("min.compaction.lag.ms")
	ts.minISR = int(atoi("min.insync.replicas"))
	return ts
}

// sortedConfigKeys lists the known keys in a stable order for responses.
func sortedConfigKeys() []string {
	keys := make([]string, 0, len(topicConfigs))
	for k := range topicConfigs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
