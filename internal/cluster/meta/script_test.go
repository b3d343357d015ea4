package meta

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/datadriven"
)

// TestScripts runs the scenarios of testdata: each script drives one State
// through commands as the metadata leader would run them (register,
// create-topic, move, cut-over...) or raw records as a log might hold them
// (change, partition, group-state), and prints what was proposed and
// whether it applied; describe prints the state. Every record is encoded
// and decoded on its way to Apply, and the invariants of invariants_test
// are checked after every command. Go test -run TestScripts -rewrite
// regenerates the outputs.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T) func(*datadriven.Cmd) string {
		s := &script{t: t, st: New(), inv: newInvariants()}
		return s.run
	})
}

type script struct {
	t      *testing.T
	st     *State
	inv    *invariants
	nextID byte
	// held are the entries of commands run with hold: proposed, not yet
	// committed, in order. commit applies the oldest.
	held [][]Record
	cmd  *datadriven.Cmd
}

// testID is the n-th test id: printed as #n.
func testID(n byte) UUID { return UUID{15: n} }

func fmtID(u UUID) string {
	if u[15] != 0 && u == testID(u[15]) {
		return fmt.Sprintf("#%d", u[15])
	}
	return u.String()
}

func (s *script) run(c *datadriven.Cmd) string {
	t := s.t
	s.cmd = c
	out := s.do(c)
	s.inv.check(t, s.st)
	return out
}

func (s *script) do(c *datadriven.Cmd) string {
	t := s.t
	now := s.ms(c, "now")
	p := int32(c.Int(t, "p", 0))
	switch c.Name {
	case "register":
		id := int32(c.Int(t, "id", 0))
		r := RegisterBrokerRecord{
			BrokerID:           id,
			GroupID:            c.Str("group", "g1"),
			IncarnationID:      testID(byte(c.Int(t, "inc", 1))),
			ClientAddress:      fmt.Sprintf("b%d:9092", id),
			ReplicationAddress: fmt.Sprintf("b%d:9095", id),
			LeaseExpiryMs:      s.ms(c, "lease-until"),
		}
		r, err := s.st.RegisterBroker(r, now)
		return s.propose(err, r)
	case "create-topic":
		s.nextID++
		id := testID(s.nextID)
		if c.Has("id") {
			id = testID(byte(c.Int(t, "id", 0)))
		}
		recs, err := s.st.CreateTopic(id, c.Str("name", ""), int32(c.Int(t, "partitions", 1)), s.configs(c), s.placement(c), now)
		return s.propose(err, recs...)
	case "create-partitions":
		recs, err := s.st.CreatePartitions(c.Str("name", ""), int32(c.Int(t, "total", 0)), s.placement(c), now)
		return s.propose(err, recs...)
	case "delete-topic":
		r, err := s.st.DeleteTopic(c.Str("name", ""))
		return s.propose(err, r)
	case "config":
		r, err := s.st.SetConfig(ResourceType(c.Str("type", "topic")), c.Str("name", ""), c.Str("key", ""), c.Str("value", ""))
		return s.propose(err, r)
	case "producer-ids":
		r, err := s.st.AllocateProducerIDs(int32(c.Int(t, "broker", 1)))
		out := s.propose(err, r)
		if err == nil {
			out += fmt.Sprintf("\nblock [%d, %d)", r.NextProducerID-ProducerIdBlockSize, r.NextProducerID)
		}
		return out
	case "move":
		r, err := s.st.StartMove(c.Str("topic", ""), p, c.Str("to", ""))
		return s.propose(err, r)
	case "cut-over":
		seq := int64(-1)
		if tp, ok := s.st.Topic(c.Str("topic", "")); ok && int(p) < len(tp.Partitions) {
			seq = tp.Partitions[p].MoveSeq
		}
		r, err := s.st.CutOver(c.Str("topic", ""), p, c.Int(t, "seq", seq), int32(c.Int(t, "fence-epoch", 0)), c.Int(t, "offset", 0))
		return s.propose(err, r)
	case "finish":
		r, err := s.st.FinishMove(c.Str("topic", ""), p)
		return s.propose(err, r)
	case "cancel":
		r, err := s.st.CancelMove(c.Str("topic", ""), p)
		return s.propose(err, r)

	// Raw records, applied without a command's checks, as a log written
	// by a faulty or racing proposer would hold them.
	case "group-state":
		return s.apply(GroupStateRecord{GroupID: c.Str("group", "g1"), Leader: int32(c.Int(t, "leader", 1)), Term: int32(c.Int(t, "term", 1)), ISR: c.Int32s(t, "isr")})
	case "partition":
		return s.apply(PartitionRecord{TopicID: s.topicID(c), Partition: p, Owner: c.Str("owner", "g1"), EpochBase: int32(c.Int(t, "base", 0))})
	case "change":
		// seq defaults to the move a step of the current state would
		// carry: the next for a start, the current one otherwise.
		move := MoveState(c.Str("move", "none"))
		id := s.topicID(c)
		seq := int64(0)
		if cur, ok := s.st.Partition(id, p); ok {
			seq = cur.MoveSeq
		}
		if move == MoveCopying {
			seq++
		}
		return s.apply(PartitionChangeRecord{
			TopicID: id, Partition: p,
			Owner: c.Str("owner", ""), EpochBase: int32(c.Int(t, "base", 0)), Move: move,
			Source: c.Str("source", ""), Target: c.Str("target", ""),
			FenceEpoch: int32(c.Int(t, "fence-epoch", 0)), FenceOffset: c.Int(t, "offset", 0),
			MoveSeq: c.Int(t, "seq", seq),
		})
	case "producer-ids-record":
		return s.apply(ProducerIdsRecord{BrokerID: 1, NextProducerID: c.Int(t, "next", 0)})

	case "commit":
		if len(s.held) == 0 {
			c.Fatalf(t, "nothing held")
		}
		recs := s.held[0]
		s.held = s.held[1:]
		return s.apply(recs...)

	case "describe":
		return s.describe(now)
	case "brokers":
		var bs []Broker
		if c.Has("group") {
			bs = s.st.GroupBrokers(c.Str("group", ""), now)
		} else {
			bs = s.st.LiveBrokers(now)
		}
		ids := []string{}
		for _, b := range bs {
			ids = append(ids, strconv.Itoa(int(b.ID)))
		}
		return "live: [" + strings.Join(ids, " ") + "]"
	case "epochs":
		tp, ok := s.st.Topic(c.Str("topic", ""))
		if !ok {
			return "no topic"
		}
		var es []string
		for _, p := range tp.Partitions {
			es = append(es, fmt.Sprintf("p%d=%d", p.Partition, p.LeaderEpoch))
		}
		return strings.Join(es, " ")
	}
	c.Fatalf(s.t, "unknown command")
	return ""
}

// propose prints a command's records and applies them as one entry, or
// prints its refusal. With hold, the entry waits for commit instead: it
// commits after whatever the script applies meanwhile.
func (s *script) propose(err error, recs ...Record) string {
	if err != nil {
		return "refused: " + err.Error()
	}
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "propose %s\n", fmtRecord(r))
	}
	if s.cmd.Has("hold") {
		s.held = append(s.held, recs)
		b.WriteString("held")
		return b.String()
	}
	if err := s.applyEncoded(recs); err != nil {
		// A command's records apply where it ran: anything else is a bug.
		s.t.Fatalf("records of a command refused: %v", err)
	}
	b.WriteString("ok")
	return b.String()
}

// apply applies one entry that no command checked.
func (s *script) apply(recs ...Record) string {
	before := s.st.clone()
	if err := s.applyEncoded(recs); err != nil {
		if !reflect.DeepEqual(before, s.st) {
			s.t.Fatalf("refused record changed the state")
		}
		return "error: " + err.Error()
	}
	return "ok"
}

// applyEncoded applies records the way a broker gets them: through the
// log entry's encoding.
func (s *script) applyEncoded(recs []Record) error {
	b, err := EncodeBatch(recs)
	if err != nil {
		s.t.Fatal(err)
	}
	got, err := DecodeBatch(b)
	if err != nil {
		s.t.Fatal(err)
	}
	if !reflect.DeepEqual(got, recs) {
		s.t.Fatalf("decoded %+v, encoded %+v", got, recs)
	}
	return s.st.ApplyBatch(got)
}

func fmtRecord(r Record) string {
	switch r := r.(type) {
	case RegisterBrokerRecord:
		return fmt.Sprintf("RegisterBrokerRecord broker=%d group=%s inc=%s lease-until=%s", r.BrokerID, r.GroupID, fmtID(r.IncarnationID), fmtMs(r.LeaseExpiryMs))
	case TopicRecord:
		return fmt.Sprintf("TopicRecord %s %s", r.Name, fmtID(r.TopicID))
	case RemoveTopicRecord:
		return fmt.Sprintf("RemoveTopicRecord %s %s", r.Name, fmtID(r.TopicID))
	case PartitionRecord:
		return fmt.Sprintf("PartitionRecord %s/%d owner=%s base=%d", fmtID(r.TopicID), r.Partition, r.Owner, r.EpochBase)
	case PartitionChangeRecord:
		out := fmt.Sprintf("PartitionChangeRecord %s/%d owner=%s base=%d move=%s", fmtID(r.TopicID), r.Partition, r.Owner, r.EpochBase, r.Move)
		if r.Move != MoveNone {
			out += fmt.Sprintf(" %s→%s", r.Source, r.Target)
		}
		if r.Move == MoveCutOver {
			out += fmt.Sprintf(" fence-epoch=%d fence-offset=%d", r.FenceEpoch, r.FenceOffset)
		}
		return out
	case ConfigRecord:
		if r.Value == "" {
			return fmt.Sprintf("ConfigRecord %s/%s delete %s", r.ResourceType, r.ResourceName, r.Name)
		}
		return fmt.Sprintf("ConfigRecord %s/%s %s=%s", r.ResourceType, r.ResourceName, r.Name, r.Value)
	case ProducerIdsRecord:
		return fmt.Sprintf("ProducerIdsRecord broker=%d next=%d", r.BrokerID, r.NextProducerID)
	case GroupStateRecord:
		return fmt.Sprintf("GroupStateRecord %s leader=%d term=%d isr=%v", r.GroupID, r.Leader, r.Term, r.ISR)
	}
	return fmt.Sprintf("%T", r)
}

func (s *script) describe(now int64) string {
	var b strings.Builder
	if bs := s.st.Brokers(); len(bs) > 0 {
		b.WriteString("brokers:\n")
		for _, br := range bs {
			live := "expired"
			if br.Live(now) {
				live = "live"
			}
			fmt.Fprintf(&b, "  %d group=%s inc=%s lease-until=%s %s\n", br.ID, br.Group, fmtID(br.Incarnation), fmtMs(br.LeaseExpiryMs), live)
		}
	}
	if gs := s.st.Groups(); len(gs) > 0 {
		b.WriteString("groups:\n")
		for _, g := range gs {
			fmt.Fprintf(&b, "  %s leader=%d term=%d isr=%v\n", g.ID, g.Leader, g.Term, g.ISR)
		}
	}
	if ts := s.st.Topics(); len(ts) > 0 {
		b.WriteString("topics:\n")
		for _, tp := range ts {
			fmt.Fprintf(&b, "  %s %s\n", tp.Name, fmtID(tp.ID))
			for _, p := range tp.Partitions {
				fmt.Fprintf(&b, "    p%d owner=%s base=%d epoch=%d", p.Partition, p.Owner, p.EpochBase, p.LeaderEpoch)
				if p.Move != MoveNone {
					fmt.Fprintf(&b, " %s %s→%s", p.Move, p.Source, p.Target)
				}
				if p.Move == MoveCutOver {
					fmt.Fprintf(&b, " fence-offset=%d", p.FenceOffset)
				}
				b.WriteString("\n")
			}
			if cfg := s.st.Configs(ResourceTopic, tp.Name); len(cfg) > 0 {
				fmt.Fprintf(&b, "    configs: %v\n", cfg)
			}
		}
	}
	if cfg := s.st.Configs(ResourceBroker, ""); len(cfg) > 0 {
		fmt.Fprintf(&b, "broker defaults: %v\n", cfg)
	}
	for _, br := range s.st.Brokers() {
		if cfg := s.st.Configs(ResourceBroker, strconv.Itoa(int(br.ID))); len(cfg) > 0 {
			fmt.Fprintf(&b, "broker %d configs: %v\n", br.ID, cfg)
		}
	}
	if ms := s.st.Moves(); len(ms) > 0 {
		b.WriteString("moves:\n")
		for _, m := range ms {
			fmt.Fprintf(&b, "  %s/%d %s %s→%s\n", m.Topic, m.Partition, m.State, m.Source, m.Target)
		}
	}
	fmt.Fprintf(&b, "next-producer-id=%d", s.st.NextProducerID())
	return b.String()
}

// ms reads a time in seconds (key=12 or key=1.5) as Unix milliseconds.
func (s *script) ms(c *datadriven.Cmd, key string) int64 {
	v := c.Str(key, "0")
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil {
		c.Fatalf(s.t, "%s=%q: %v", key, v, err)
	}
	return int64(sec * 1000)
}

func fmtMs(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s" }

// topicID reads topic=NAME (an existing topic) or id=N (any test id).
func (s *script) topicID(c *datadriven.Cmd) UUID {
	if c.Has("id") {
		return testID(byte(c.Int(s.t, "id", 0)))
	}
	tp, ok := s.st.Topic(c.Str("topic", ""))
	if !ok {
		c.Fatalf(s.t, "no topic %q", c.Str("topic", ""))
	}
	return tp.ID
}

// configs reads config=k:v,k:v.
func (s *script) configs(c *datadriven.Cmd) map[string]string {
	if !c.Has("config") {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(c.Str("config", ""), ",") {
		k, v, _ := strings.Cut(kv, ":")
		m[k] = v
	}
	return m
}

func (s *script) placement(c *datadriven.Cmd) Placement {
	p := Placement{RoundRobin: c.Has("round-robin")}
	if c.Has("groups") {
		p.Groups = strings.Split(c.Str("groups", ""), ",")
	}
	return p
}
