package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
)

// movedAway reports, in cluster mode, whether another group owns the
// partition by now: checked again after an answer was read from the log,
// since a move's last step empties the old owner's copy (after this
// broker's metadata names the new owner), and offsets read from an
// emptied copy would send a consumer back to 0 or make it see a
// truncation.
func (b *Broker) movedAway(topic string, index int32) bool {
	_, foreign := b.foreignPartition(topic, index)
	return foreign
}

// partitionOf resolves a topic and partition for the admin handlers.
// In cluster mode a partition another group owns is NOT_LEADER_OR_FOLLOWER.
func (b *Broker) partitionOf(name string, index int32) (*partition.Partition, int16) {
	var t *topic
	if b.cl == nil {
		t = b.lookup(name)
	} else if _, foreign := b.cl.foreign(name, index); foreign {
		return nil, errNotLeaderOrFollower
	} else {
		t = b.cl.local(name)
	}
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return nil, errUnknownTopicOrPartition
	}
	return t.partitions[index], 0
}

func (b *Broker) handleListOffsets(r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range r.Topics {
		out := kmsg.ListOffsetsResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			op := kmsg.NewListOffsetsResponseTopicPartition()
			op.Partition = rp.Partition
			op.LeaderEpoch = b.epoch.Load()
			p, code := b.partitionOf(rt.Topic, rp.Partition)
			if code == 0 {
				op.LeaderEpoch = b.exposedEpoch(p)
				code = b.checkLeaderEpoch(p, rp.CurrentLeaderEpoch)
			}
			if code != 0 {
				op.ErrorCode = code
				out.Partitions = append(out.Partitions, op)
				continue
			}
			hw := p.HighWatermark()
			// KIP-207: a new leader whose high watermark has not yet
			// reached its log end as of its promotion would answer a
			// "latest" below what the previous leader answered.
			lagging := b.hwBehindEpochStart(p)
			if r.IsolationLevel == 1 {
				// read_committed sees up to the last stable offset.
				hw = p.LSO(hw)
			}
			switch ts := rp.Timestamp; ts {
			case -1: // latest
				op.Offset = hw
				if lagging {
					op.ErrorCode, op.Offset = errOffsetNotAvailable, -1
				}
			case -2: // earliest
				op.Offset = p.Log().StartOffset()
			case -3: // the record with the largest timestamp (KIP-734)
				op.Offset, op.Timestamp = -1, -1
				if off, mts, ok, err := p.Log().MaxTimestamp(); err == nil && ok && off < hw {
					op.Offset, op.Timestamp = off, mts
				}
			default:
				if ts < 0 {
					op.ErrorCode = errInvalidRequest
					break
				}
				off, found, ok, err := p.Log().OffsetForTimestamp(ts)
				switch {
				case err != nil:
					b.log.Error("timestamp lookup failed", "topic", rt.Topic, "partition", rp.Partition, "err", err)
					op.ErrorCode = errKafkaStorageError
				case (!ok || off >= hw) && lagging:
					// The answer may lie in what is not yet visible.
					op.ErrorCode, op.Offset, op.Timestamp = errOffsetNotAvailable, -1, -1
				case !ok || off >= hw:
					op.Offset, op.Timestamp = -1, -1
				default:
					op.Offset, op.Timestamp = off, found
				}
			}
			if b.movedAway(rt.Topic, rp.Partition) {
				op.ErrorCode, op.Offset, op.Timestamp = errNotLeaderOrFollower, -1, -1
			}
			if r.Version == 0 {
				op.OldStyleOffsets = []int64{op.Offset}
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (b *Broker) handleCreateTopics(r *kmsg.CreateTopicsRequest) kmsg.Response {
	return b.createTopics(r, localTopics{b})
}

// topicCreator is where CreateTopics creates: this broker's registry
// (localTopics), or the metadata log in cluster mode (clusterMode).
type topicCreator interface {
	// exists reports whether the topic exists already.
	exists(name string) bool
	// maxPartitions is the most partitions one topic may be created with.
	maxPartitions() int
	// assign turns a manual replica assignment into the group owning
	// each partition, in partition order, or answers why it cannot.
	assign(a []kmsg.CreateTopicsRequestTopicReplicaAssignment) (groups []string, code int16, msg string)
	// create creates the topic, its partitions in groups when those are
	// given (else wherever the creator places them), or answers why not.
	create(name string, n int, configs map[string]string, groups []string) (id [16]byte, code int16, msg string)
}

// createTopics checks each topic of a CreateTopics request the same way
// wherever it is created, and has c create the valid ones.
func (b *Broker) createTopics(r *kmsg.CreateTopicsRequest, c topicCreator) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	seen := map[string]int{}
	for _, rt := range r.Topics {
		seen[rt.Topic]++
	}
	copies := 1
	if b.repl != nil {
		copies = len(b.repl.ids)
	}
	for _, rt := range r.Topics {
		out := kmsg.NewCreateTopicsResponseTopic()
		out.Topic = rt.Topic
		fail := func(code int16, msg string) {
			out.ErrorCode = code
			out.ErrorMessage = &msg
		}
		n := int(rt.NumPartitions)
		var groups []string
		assignCode, assignMsg := int16(0), ""
		switch {
		case len(rt.ReplicaAssignment) > 0 && (n != -1 || rt.ReplicationFactor != -1):
			assignCode, assignMsg = errInvalidRequest, "a manual replica assignment comes with partition count and replication factor -1"
		case len(rt.ReplicaAssignment) > 0:
			groups, assignCode, assignMsg = c.assign(rt.ReplicaAssignment)
			n = len(rt.ReplicaAssignment)
		case n == -1:
			n = b.cfg.DefaultPartitions
		}
		overrides := map[string]string{}
		var cfgErr error
		for _, c := range rt.Configs {
			if err := validateTopicConfig(c.Name, c.Value); err != nil {
				cfgErr = err
				break
			}
			overrides[c.Name] = *c.Value
		}
		switch err := validTopicName(rt.Topic); {
		case seen[rt.Topic] > 1:
			fail(errInvalidRequest, "topic listed more than once in the request")
		case err != nil:
			fail(errInvalidTopicException, err.Error())
		case internalTopic(rt.Topic):
			fail(errInvalidTopicException, rt.Topic+" is an internal topic: the broker creates it")
		case c.exists(rt.Topic):
			fail(errTopicAlreadyExists, "topic "+rt.Topic+" already exists")
		case assignCode != 0:
			fail(assignCode, assignMsg)
		case n < 1 || n > c.maxPartitions():
			fail(errInvalidPartitions, fmt.Sprintf("partition count must be between 1 and %d", c.maxPartitions()))
		case b.repl == nil && rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1:
			fail(errInvalidReplicationFact, "this broker stores one copy of each partition: use replication factor 1 or -1")
		case b.repl != nil && rt.ReplicationFactor != -1 && int(rt.ReplicationFactor) != copies:
			fail(errInvalidReplicationFact, fmt.Sprintf("every replica of the group holds every partition: use replication factor %d or -1", copies))
		case cfgErr != nil:
			fail(errInvalidConfig, cfgErr.Error())
		case r.ValidateOnly:
		default:
			id, code, msg := c.create(rt.Topic, n, overrides, groups)
			if code != 0 {
				fail(code, msg)
				break
			}
			out.TopicID = id
		}
		if out.ErrorCode == 0 {
			out.NumPartitions = int32(n)
			out.ReplicationFactor = int16(copies)
			for _, k := range sortedConfigKeys() {
				v, src := b.configValue(overrides, k)
				out.Configs = append(out.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: k, Value: &v, Source: int8(src)})
			}
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// localTopics creates topics in this broker's registry.
type localTopics struct{ b *Broker }

func (l localTopics) exists(name string) bool { return l.b.lookup(name) != nil }

func (localTopics) maxPartitions() int { return 100000 }

func (localTopics) assign([]kmsg.CreateTopicsRequestTopicReplicaAssignment) ([]string, int16, string) {
	return nil, errInvalidReplicaAssign, "manual replica assignment is not supported: each partition lives on every broker of its group (or on the single broker)"
}

func (l localTopics) create(name string, n int, configs map[string]string, _ []string) ([16]byte, int16, string) {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.topics[name] != nil {
		return [16]byte{}, errTopicAlreadyExists, "topic " + name + " already exists"
	}
	t, err := b.createTopicLocked(name, n, configs)
	if err != nil {
		b.log.Error("create topic failed", "topic", name, "err", err)
		return [16]byte{}, errKafkaStorageError, err.Error()
	}
	return t.id, 0, ""
}

// deleteAsk is one topic a DeleteTopics request names: by name, or (v6+)
// by id when name is nil.
type deleteAsk struct {
	name *string
	id   [16]byte
}

// deleteAsks lists the topics a DeleteTopics request names.
func deleteAsks(r *kmsg.DeleteTopicsRequest) []deleteAsk {
	var asks []deleteAsk
	if r.Version >= 6 {
		for _, t := range r.Topics {
			asks = append(asks, deleteAsk{t.Topic, t.TopicID})
		}
		return asks
	}
	for i := range r.TopicNames {
		asks = append(asks, deleteAsk{&r.TopicNames[i], [16]byte{}})
	}
	return asks
}

func (b *Broker) handleDeleteTopics(r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	for _, a := range deleteAsks(r) {
		out := kmsg.NewDeleteTopicsResponseTopic()
		out.Topic, out.TopicID = a.name, a.id
		b.mu.Lock()
		var t *topic
		if a.name != nil {
			t = b.topics[*a.name]
		} else {
			t = b.byID[a.id]
		}
		switch {
		case t == nil && a.name == nil:
			out.ErrorCode = errUnknownTopicID
		case t == nil:
			out.ErrorCode = errUnknownTopicOrPartition
		case internalTopic(t.name):
			out.ErrorCode = errInvalidTopicException
		default:
			name := t.name
			out.Topic, out.TopicID = &name, t.id
			if err := b.deleteTopicLocked(t); err != nil {
				b.log.Error("delete topic failed", "topic", t.name, "err", err)
				out.ErrorCode = errKafkaStorageError
			}
		}
		b.mu.Unlock()
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (b *Broker) handleCreatePartitions(r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range r.Topics {
		out := kmsg.NewCreatePartitionsResponseTopic()
		out.Topic = rt.Topic
		fail := func(code int16, msg string) {
			out.ErrorCode = code
			out.ErrorMessage = &msg
		}
		b.mu.Lock()
		t := b.topics[rt.Topic]
		switch {
		case t == nil:
			fail(errUnknownTopicOrPartition, "no topic "+rt.Topic)
		case internalTopic(rt.Topic):
			fail(errInvalidTopicException, "internal topics keep their partition count")
		case int(rt.Count) <= len(t.partitions):
			fail(errInvalidPartitions, "partition count can only grow")
		case rt.Count > 100000:
			fail(errInvalidPartitions, "partition count must not exceed 100000")
		case len(rt.Assignment) > 0:
			fail(errInvalidReplicaAssign, "manual replica assignment is not supported")
		case r.ValidateOnly:
		default:
			if err := b.addPartitionsLocked(t, int(rt.Count)); err != nil {
				fail(errKafkaStorageError, err.Error())
			}
		}
		b.mu.Unlock()
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// addPartitionsLocked grows t to count partitions and installs the new
// snapshot. The caller holds b.mu.
func (b *Broker) addPartitionsLocked(t *topic, count int) error {
	added, err := b.openPartitions(t, len(t.partitions), count)
	if err != nil {
		b.log.Error("create partition failed", "topic", t.name, "err", err)
		return err
	}
	parts := append(slices.Clip(t.partitions), added...)
	closeNew := func() {
		for _, p := range added {
			p.Close()
		}
	}
	nt := *t
	nt.partitions = parts
	if err := b.saveTopic(&nt); err != nil {
		closeNew()
		return err
	}
	b.topics[nt.name], b.byID[nt.id] = &nt, &nt
	b.log.Info("added partitions", "topic", t.name, "partitions", len(parts))
	return nil
}

func (b *Broker) handleDeleteRecords(r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, rt := range r.Topics {
		out := kmsg.DeleteRecordsResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			op := kmsg.NewDeleteRecordsResponseTopicPartition()
			op.Partition = rp.Partition
			op.LowWatermark = -1
			p, code := b.partitionOf(rt.Topic, rp.Partition)
			if code == 0 && internalTopic(rt.Topic) {
				// Deleting broker state (producer-id blocks, offsets)
				// would let ids repeat and offsets vanish.
				code = errInvalidTopicException
			}
			if code != 0 {
				op.ErrorCode = code
				out.Partitions = append(out.Partitions, op)
				continue
			}
			hw := p.HighWatermark()
			off := rp.Offset
			if off == -1 {
				off = hw
			}
			if off < 0 || off > hw {
				op.ErrorCode = errOffsetOutOfRange
				out.Partitions = append(out.Partitions, op)
				continue
			}
			start, err := p.Log().DeleteRecords(off)
			if errors.Is(err, storage.ErrOffsetOutOfRange) {
				op.ErrorCode = errOffsetOutOfRange
			} else if err != nil {
				b.log.Error("delete records failed", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				op.ErrorCode = errKafkaStorageError
			} else {
				op.LowWatermark = start
				p.TrimAborted()
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (b *Broker) handleOffsetForLeaderEpoch(r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range r.Topics {
		out := kmsg.OffsetForLeaderEpochResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			op := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			op.Partition = rp.Partition
			op.LeaderEpoch, op.EndOffset = -1, -1
			p, code := b.partitionOf(rt.Topic, rp.Partition)
			if code == 0 && r.Version >= 2 {
				code = b.checkLeaderEpoch(p, rp.CurrentLeaderEpoch)
			}
			if code != 0 {
				op.ErrorCode = code
			} else {
				op.LeaderEpoch, op.EndOffset = p.Log().EndOffsetForEpoch(rp.LeaderEpoch)
				// The current epoch ends at the log end, whose records
				// above the high watermark could still be taken back: a
				// consumer is told the high watermark. An older epoch's
				// end is where a later epoch began in this leader's log
				// and is final; clamping it to the high watermark, which
				// lags right after a failover, made consumers that had
				// read up to the old leader's high watermark see a false
				// truncation and read records again.
				if hw := p.HighWatermark(); op.LeaderEpoch == b.exposedEpoch(p) && op.EndOffset > hw {
					op.EndOffset = hw
				}
				if b.movedAway(rt.Topic, rp.Partition) {
					op.ErrorCode, op.LeaderEpoch, op.EndOffset = errNotLeaderOrFollower, -1, -1
				}
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// configValue returns a topic config's effective value and its source
// (1 dynamic topic config, 5 default).
func (b *Broker) configValue(overrides map[string]string, key string) (string, kmsg.ConfigSource) {
	if v, ok := overrides[key]; ok {
		return v, 1
	}
	return topicConfigs[key].def(&b.cfg), 5
}

func (b *Broker) handleDescribeConfigs(r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range r.Resources {
		out := kmsg.NewDescribeConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		want := func(k string) bool {
			if rr.ConfigNames == nil {
				return true
			}
			for _, n := range rr.ConfigNames {
				if n == k {
					return true
				}
			}
			return false
		}
		switch rr.ResourceType {
		case 2: // topic
			t := b.lookup(rr.ResourceName)
			if t == nil {
				out.ErrorCode = errUnknownTopicOrPartition
				break
			}
			overrides := t.overrides
			for _, k := range sortedConfigKeys() {
				if !want(k) {
					continue
				}
				v, src := b.configValue(overrides, k)
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source, c.IsDefault = k, &v, src, src == 5
				if r.IncludeDocumentation {
					doc := topicConfigs[k].doc
					c.Documentation = &doc
				}
				if r.IncludeSynonyms && src == 1 {
					def := topicConfigs[k].def(&b.cfg)
					c.ConfigSynonyms = append(c.ConfigSynonyms,
						kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{Name: k, Value: &v, Source: 1},
						kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{Name: k, Value: &def, Source: 5})
				}
				out.Configs = append(out.Configs, c)
			}
		case 4: // broker
			for _, k := range sortedConfigKeys() {
				if !want(k) {
					continue
				}
				v := topicConfigs[k].def(&b.cfg)
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source, c.IsDefault, c.ReadOnly = k, &v, 5, true, true
				out.Configs = append(out.Configs, c)
			}
			if b.cl != nil && want(meta.DrainingGroupsConfig) {
				// The cluster-wide dynamic config (source 4,
				// DYNAMIC_DEFAULT_BROKER_CONFIG), empty when unset.
				v := strings.Join(b.cl.drainingGroups(), ",")
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source, c.IsDefault = meta.DrainingGroupsConfig, &v, 4, v == ""
				out.Configs = append(out.Configs, c)
			}
		default:
			out.ErrorCode = errInvalidRequest
			msg := "only topic and broker resources can be described"
			out.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// alterTopicConfigs replaces a topic's overrides after validating the new
// set, persists them and applies them to the open logs.
func (b *Broker) alterTopicConfigs(name string, edit func(map[string]string) error, validateOnly bool) (int16, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil {
		return errUnknownTopicOrPartition, "no topic " + name
	}
	if internalTopic(name) {
		return errInvalidTopicException, name + " is an internal topic: its configs are the broker's"
	}
	next := make(map[string]string, len(t.overrides))
	for k, v := range t.overrides {
		next[k] = v
	}
	if err := edit(next); err != nil {
		return errInvalidConfig, err.Error()
	}
	for k, v := range next {
		v := v
		if err := validateTopicConfig(k, &v); err != nil {
			return errInvalidConfig, err.Error()
		}
	}
	if validateOnly {
		return 0, ""
	}
	if err := b.setTopicConfigsLocked(t, next); err != nil {
		return errKafkaStorageError, err.Error()
	}
	return 0, ""
}

// setTopicConfigsLocked installs configs as t's overrides, saved and in
// force. The caller holds b.mu and has validated them.
func (b *Broker) setTopicConfigsLocked(t *topic, configs map[string]string) error {
	nt := *t
	nt.overrides = configs
	nt.settings = resolveSettings(&b.cfg, configs)
	if err := b.saveTopic(&nt); err != nil {
		return err
	}
	b.topics[nt.name], b.byID[nt.id] = &nt, &nt
	opts := b.storageOptions(&nt)
	for _, p := range nt.partitions {
		p.Log().Reconfigure(opts.SegmentBytes, opts.RetentionMs, opts.RetentionBytes)
	}
	b.log.Info("altered topic configs", "topic", t.name, "configs", configs)
	return nil
}

// alterResource applies edit to a topic resource; broker settings come
// only from the config file.
func (b *Broker) alterResource(typ int8, name string, validateOnly bool, edit func(map[string]string) error) (int16, *string) {
	var code int16
	var msg string
	if typ == resourceBroker && name == "" && b.cl != nil {
		code, msg = b.cl.alterClusterConfigs(edit, validateOnly)
	} else if typ != resourceTopic {
		code, msg = errInvalidRequest, "only topic configs (and, in cluster mode, the cluster-wide broker config "+meta.DrainingGroupsConfig+") can be altered; broker settings come from the config file"
	} else if b.cl != nil {
		code, msg = b.cl.alterTopicConfigs(name, edit, validateOnly)
	} else {
		code, msg = b.alterTopicConfigs(name, edit, validateOnly)
	}
	if msg == "" {
		return code, nil
	}
	return code, &msg
}

func (b *Broker) handleIncrementalAlterConfigs(r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range r.Resources {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		specs, what := topicConfigs, "topic"
		if int8(rr.ResourceType) == resourceBroker {
			specs, what = clusterConfigs, "cluster-wide broker"
		}
		out.ErrorCode, out.ErrorMessage = b.alterResource(int8(rr.ResourceType), rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			for _, c := range rr.Configs {
				if _, ok := specs[c.Name]; !ok {
					return errors.New("unknown or unsupported " + what + " config " + c.Name)
				}
				switch c.Op {
				case 0: // SET
					if c.Value == nil {
						return errors.New("SET of " + c.Name + " needs a value")
					}
					m[c.Name] = *c.Value
				case 1: // DELETE: back to the default
					delete(m, c.Name)
				case 2, 3: // APPEND, SUBTRACT on list configs
					if !specs[c.Name].list || c.Value == nil {
						return errors.New(c.Name + " is not a list config")
					}
					cur := m[c.Name]
					if int8(rr.ResourceType) == resourceTopic {
						cur, _ = b.configValue(m, c.Name)
					}
					m[c.Name] = editList(cur, *c.Value, c.Op == 2)
				default:
					return errors.New("unknown config operation")
				}
			}
			return nil
		})
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

func (b *Broker) handleAlterConfigs(r *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range r.Resources {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		// AlterConfigs replaces the whole set of overrides.
		out.ErrorCode, out.ErrorMessage = b.alterResource(int8(rr.ResourceType), rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			for k := range m {
				delete(m, k)
			}
			for _, c := range rr.Configs {
				if c.Value == nil {
					return errors.New("config " + c.Name + " needs a value")
				}
				m[c.Name] = *c.Value
			}
			return nil
		})
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

func editList(cur, val string, add bool) string {
	var items []string
	for _, x := range strings.Split(cur, ",") {
		if x = strings.TrimSpace(x); x != "" && (add || x != val) {
			items = append(items, x)
		}
	}
	if add {
		present := false
		for _, x := range items {
			present = present || x == val
		}
		if !present {
			items = append(items, val)
		}
	}
	return strings.Join(items, ",")
}
