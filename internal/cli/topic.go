package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
)

// TopicUsage is the usage text of `moonmq topic`.
const TopicUsage = `usage: moonmq topic describe [--bootstrap HOST:PORT[,HOST:PORT...]] [--config FILE] [TOPIC...]
       moonmq topic list     [--bootstrap HOST:PORT[,HOST:PORT...]] [--config FILE]

describe prints each topic as kafka-topics --describe does (in cluster mode
with each partition's owner group after its number, "Group: g1"):
  Topic: events TopicId: ... PartitionCount: 1 ReplicationFactor: 3 Configs: retention.ms=60000
  Topic: events Partition: 0 Leader: 1 Replicas: 1,2,3 Isr: 1,2,3 Epoch: 2 LogStart: 0 HighWatermark: 42
Without TOPIC it describes every topic but the internal ones. list prints
the topic names. The brokers come from --bootstrap, else from --config
(every replica's ClientAddress, so any live replica answers), else
127.0.0.1:9092.
`

// TopicView is one topic as `topic describe` prints it.
type TopicView struct {
	Name string
	// ID is the topic id as Kafka prints it (URL-safe base64), "" if none.
	ID                string
	ReplicationFactor int
	// Configs are the "key=value" settings made on the topic itself.
	Configs    []string
	Partitions []PartitionView
	// Err is why the topic could not be described ("" if it could).
	Err string
}

// PartitionView is one partition as `topic describe` prints it.
type PartitionView struct {
	Partition int32
	// Group is the replication group that owns the partition in cluster
	// mode (its replicas' rack), "" otherwise.
	Group string
	// Leader is -1 when there is none.
	Leader                 int32
	Epoch                  int32
	Replicas, ISR, Offline []int32
	// LogStart and HighWatermark are -1 when unknown; OffsetsErr says why
	// when the broker refused them (a new leader answers
	// OFFSET_NOT_AVAILABLE until its high watermark caught up).
	LogStart, HighWatermark int64
	OffsetsErr              string
	// Err is the partition's metadata error ("" if none).
	Err string
}

// BuildTopicViews assembles topic views from kadm's answers. configs,
// starts and ends may be nil (not asked, or the request failed): those
// fields are left out.
func BuildTopicViews(topics kadm.TopicDetails, configs kadm.ResourceConfigs, starts, ends kadm.ListedOffsets) []TopicView {
	out := make([]TopicView, 0, len(topics))
	for _, td := range topics.Sorted() {
		v := TopicView{Name: td.Topic}
		if td.Err != nil {
			v.Err = td.Err.Error()
			out = append(out, v)
			continue
		}
		if td.ID != (kadm.TopicID{}) {
			v.ID = base64.RawURLEncoding.EncodeToString(td.ID[:])
		}
		v.ReplicationFactor = td.Partitions.NumReplicas()
		if rc, err := configs.On(td.Topic, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					v.Configs = append(v.Configs, c.Key+"="+c.MaybeValue())
				}
			}
			sort.Strings(v.Configs)
		}
		for _, pd := range td.Partitions.Sorted() {
			p := PartitionView{Partition: pd.Partition, Leader: pd.Leader, Epoch: pd.LeaderEpoch,
				Replicas: pd.Replicas, ISR: pd.ISR, Offline: pd.OfflineReplicas, LogStart: -1, HighWatermark: -1}
			if pd.Err != nil {
				p.Err = pd.Err.Error()
			}
			if o, ok := starts.Lookup(td.Topic, pd.Partition); ok {
				if o.Err != nil {
					p.OffsetsErr = o.Err.Error()
				} else {
					p.LogStart = o.Offset
				}
			}
			if o, ok := ends.Lookup(td.Topic, pd.Partition); ok {
				if o.Err != nil {
					p.OffsetsErr = o.Err.Error()
				} else {
					p.HighWatermark = o.Offset
				}
			}
			v.Partitions = append(v.Partitions, p)
		}
		out = append(out, v)
	}
	return out
}

// SetGroups names each partition's owner group from its replicas' rack,
// which a broker in cluster mode sets to its group (docs/CLUSTER.md).
func SetGroups(views []TopicView, brokers kadm.BrokerDetails) {
	rack := map[int32]string{}
	for _, b := range brokers {
		if b.Rack != nil {
			rack[b.NodeID] = *b.Rack
		}
	}
	for i := range views {
		for j := range views[i].Partitions {
			p := &views[i].Partitions[j]
			if len(p.Replicas) > 0 {
				p.Group = rack[p.Replicas[0]]
			}
		}
	}
}

// FormatTopics prints topics as kafka-topics --describe does, one header
// line per topic and one line per partition, fields separated by spaces.
func FormatTopics(w io.Writer, topics []TopicView) {
	for _, t := range topics {
		if t.Err != "" {
			fmt.Fprintf(w, "Topic: %s Error: %s\n", t.Name, t.Err)
			continue
		}
		head := "Topic: " + t.Name
		if t.ID != "" {
			head += " TopicId: " + t.ID
		}
		head += fmt.Sprintf(" PartitionCount: %d ReplicationFactor: %d Configs:", len(t.Partitions), t.ReplicationFactor)
		if len(t.Configs) > 0 {
			head += " " + strings.Join(t.Configs, ",")
		}
		fmt.Fprintln(w, head)
		for _, p := range t.Partitions {
			fmt.Fprintln(w, partitionLine(t.Name, p))
		}
	}
}

func partitionLine(topic string, p PartitionView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Topic: %s Partition: %d", topic, p.Partition)
	if p.Group != "" {
		fmt.Fprintf(&b, " Group: %s", p.Group)
	}
	if p.Err != "" && len(p.Replicas) == 0 {
		fmt.Fprintf(&b, " Error: %s", p.Err)
		return b.String()
	}
	leader := "none"
	if p.Leader >= 0 {
		leader = strconv.Itoa(int(p.Leader))
	}
	fmt.Fprintf(&b, " Leader: %s Replicas: %s Isr: %s", leader, ids(p.Replicas), ids(p.ISR))
	if len(p.Offline) > 0 {
		fmt.Fprintf(&b, " Offline: %s", ids(p.Offline))
	}
	fmt.Fprintf(&b, " Epoch: %d", p.Epoch)
	if p.LogStart >= 0 {
		fmt.Fprintf(&b, " LogStart: %d", p.LogStart)
	}
	if p.HighWatermark >= 0 {
		fmt.Fprintf(&b, " HighWatermark: %d", p.HighWatermark)
	}
	if p.OffsetsErr != "" {
		fmt.Fprintf(&b, " Offsets: %s", firstWord(p.OffsetsErr))
	}
	if p.Err != "" {
		fmt.Fprintf(&b, " Error: %s", firstWord(p.Err))
	}
	return b.String()
}

// firstWord keeps a Kafka error's name ("OFFSET_NOT_AVAILABLE") and drops
// its sentence, which would break the one-line-per-partition layout.
func firstWord(s string) string {
	if i := strings.IndexByte(s, ':'); i > 0 {
		return s[:i]
	}
	return s
}

// Topic runs `moonmq topic describe|list` and returns the process exit
// code: 0 when every topic asked for was described, 1 otherwise, 2 for bad
// usage.
func Topic(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, TopicUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "describe", "list":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, TopicUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "moonmq topic: unknown subcommand %q\n%s", sub, TopicUsage)
		return 2
	}
	fs := flag.NewFlagSet("topic "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, TopicUsage); fs.PrintDefaults() }
	af := addAdminFlags(fs)
	if code := parseAdmin(fs, args[1:]); code >= 0 {
		return code
	}
	names := fs.Args()
	if sub == "list" && len(names) > 0 {
		fmt.Fprintf(stderr, "moonmq topic list: unexpected argument %q\n", names[0])
		return 2
	}
	adm, seeds, ok := af.client("moonmq topic", stderr)
	if !ok {
		return 2
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, *af.timeout)
	defer cancel()

	tds, err := adm.ListTopics(ctx, names...)
	if err != nil {
		af.noBroker("moonmq topic", stderr, seeds, err)
		return 1
	}
	if sub == "list" {
		for _, n := range tds.Names() {
			fmt.Fprintln(stdout, n)
		}
		return 0
	}
	var found []string
	for _, td := range tds.Sorted() {
		if td.Err == nil {
			found = append(found, td.Topic)
		}
	}
	var cfgs kadm.ResourceConfigs
	var starts, ends kadm.ListedOffsets
	if len(found) > 0 {
		// Partial answers are still worth printing: a partition whose
		// offsets failed shows the error in its line.
		cfgs, _ = adm.DescribeTopicConfigs(ctx, found...)
		starts, _ = adm.ListStartOffsets(ctx, found...)
		ends, _ = adm.ListEndOffsets(ctx, found...)
	}
	views := BuildTopicViews(tds, cfgs, starts, ends)
	if bs, err := adm.BrokerMetadata(ctx); err == nil {
		SetGroups(views, bs.Brokers)
	}
	if len(views) == 0 {
		fmt.Fprintln(stderr, "moonmq topic: no topics")
		return 0
	}
	FormatTopics(stdout, views)
	if len(found) < len(views) {
		return 1
	}
	return 0
}

// seedBrokers picks the brokers to ask: the flag, else the config's client
// addresses (every replica's, so a client finds the leader from any), else
// the default client port.
func seedBrokers(flagValue, path string) ([]string, error) {
	if flagValue != "" {
		var out []string
		for _, s := range strings.Split(flagValue, ",") {
			if s = strings.TrimSpace(s); s != "" {
				if _, _, err := net.SplitHostPort(s); err != nil {
					return nil, fmt.Errorf("--bootstrap %q: %v (want HOST:PORT[,HOST:PORT...])", s, err)
				}
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, errors.New("--bootstrap is empty (want HOST:PORT[,HOST:PORT...])")
		}
		return out, nil
	}
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	}
	self := cfg.AdvertisedAddress
	if self == "" {
		self = dialAddr(cfg.Host, cfg.Port)
	}
	out := []string{self}
	if r := cfg.Replication; r != nil && r.Enabled {
		if r.ClientAddress != "" {
			out[0] = r.ClientAddress
		}
		for _, p := range r.Peers {
			if p.ClientAddress != "" {
				out = append(out, p.ClientAddress)
			}
		}
	}
	return out, nil
}
