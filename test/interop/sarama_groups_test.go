package interop

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// waitFor polls cond until it holds, and fails the test with what once the
// timeout passes. The poll only decides when to look; every assertion is
// made on state after cond held.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func saramaCreateTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(sarama.V2_8_0_0))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
}

// saramaProduceKeys sends one record per key, key i to partition i%partitions.
func saramaProduceKeys(t *testing.T, addr, topic string, partitions int32, keys []string) {
	t.Helper()
	cfg := saramaConfig(sarama.V2_8_0_0)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	saramaIdempotent(cfg)
	prod, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var msgs []*sarama.ProducerMessage
	for i, k := range keys {
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: topic, Partition: int32(i) % partitions,
			Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("v-" + k),
		})
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatalf("SendMessages: %v", err)
	}
}

func keyRange(prefix string, from, to int) []string {
	var ks []string
	for i := from; i < to; i++ {
		ks = append(ks, fmt.Sprintf("%s-%d", prefix, i))
	}
	return ks
}

// groupSession is what one member's handler saw of one generation.
type groupSession struct {
	generation int32
	memberID   string
	claims     []int32
	initial    map[int32]int64 // partition -> claim.InitialOffset()
	records    int
}

// groupMember is a sarama.ConsumerGroupHandler that records its sessions
// and every record it is handed, marking each and committing explicitly
// (auto-commit is off) when it reaches a claim's high watermark and when
// the session ends.
type groupMember struct {
	name  string
	group sarama.ConsumerGroup

	mu       sync.Mutex
	sessions []*groupSession
	seen     map[string]int // key -> times delivered
	order    []string       // keys in delivery order
	errs     []error
	done     chan struct{}
}

func (m *groupMember) Setup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var claims []int32
	for _, ps := range s.Claims() {
		claims = append(claims, ps...)
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i] < claims[j] })
	m.sessions = append(m.sessions, &groupSession{
		generation: s.GenerationID(), memberID: s.MemberID(), claims: claims, initial: map[int32]int64{},
	})
	return nil
}

func (m *groupMember) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	return nil
}

func (m *groupMember) session(gen int32) *groupSession {
	for _, s := range m.sessions {
		if s.generation == gen {
			return s
		}
	}
	return nil
}

func (m *groupMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	m.mu.Lock()
	m.session(s.GenerationID()).initial[c.Partition()] = c.InitialOffset()
	m.mu.Unlock()
	for {
		select {
		case msg, ok := <-c.Messages():
			if !ok {
				return nil
			}
			m.mu.Lock()
			m.seen[string(msg.Key)]++
			m.order = append(m.order, string(msg.Key))
			m.session(s.GenerationID()).records++
			m.mu.Unlock()
			s.MarkMessage(msg, "")
			if msg.Offset+1 >= c.HighWaterMarkOffset() {
				s.Commit()
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func startGroupMember(t *testing.T, v sarama.KafkaVersion, addr, groupID, topic, name string) *groupMember {
	t.Helper()
	cfg := saramaConfig(v)
	cfg.ClientID = name
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	g, err := sarama.NewConsumerGroup([]string{addr}, groupID, cfg)
	if err != nil {
		t.Fatalf("%s: NewConsumerGroup: %v", name, err)
	}
	m := &groupMember{name: name, group: g, seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		for err := range g.Errors() {
			m.mu.Lock()
			m.errs = append(m.errs, err)
			m.mu.Unlock()
		}
	}()
	go func() {
		defer close(m.done)
		for {
			err := g.Consume(context.Background(), []string{topic}, m)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			if err != nil {
				m.mu.Lock()
				m.errs = append(m.errs, fmt.Errorf("Consume: %w", err))
				m.mu.Unlock()
				return
			}
		}
	}()
	return m
}

func (m *groupMember) close(t *testing.T) {
	t.Helper()
	if err := m.group.Close(); err != nil {
		t.Errorf("%s: Close: %v", m.name, err)
	}
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Consume did not return after Close", m.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, err := range m.errs {
		t.Errorf("%s: consumer group error: %v", m.name, err)
	}
}

func (m *groupMember) lastSession() *groupSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sessions) == 0 {
		return nil
	}
	return m.sessions[len(m.sessions)-1]
}

func (m *groupMember) seenCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.order)
}

func committedOffsets(t *testing.T, adm sarama.ClusterAdmin, group, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	var ps []int32
	for p := int32(0); p < partitions; p++ {
		ps = append(ps, p)
	}
	resp, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: ps})
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets: %v", err)
	}
	if resp.Err != sarama.ErrNoError {
		t.Fatalf("ListConsumerGroupOffsets: %v", resp.Err)
	}
	out := map[int32]int64{}
	for _, p := range ps {
		b := resp.GetBlock(topic, p)
		if b == nil {
			t.Fatalf("ListConsumerGroupOffsets: no block for %s/%d", topic, p)
		}
		if b.Err != sarama.ErrNoError {
			t.Fatalf("ListConsumerGroupOffsets %s/%d: %v", topic, p, b.Err)
		}
		out[p] = b.Offset
	}
	return out
}

// TestSaramaConsumerGroup: two members share a 4-partition topic, commit,
// leave; a third member resumes from the commits; then the admin API
// lists, describes, reads offsets of and deletes the group.
func TestSaramaConsumerGroup(t *testing.T) {
	in := startBroker(t)
	saramaLog.set(newTestLog(t, "sarama: "))
	t.Cleanup(func() { saramaLog.set(nil) })
	for _, v := range []sarama.KafkaVersion{sarama.V2_8_0_0, sarama.V3_6_0_0} {
		t.Run(v.String(), func(t *testing.T) { testSaramaConsumerGroup(t, in.Addr(), v) })
	}
}

func testSaramaConsumerGroup(t *testing.T, addr string, v sarama.KafkaVersion) {
	topic, groupID := "sarama-group-"+v.String(), "sarama-group-"+v.String()
	const partitions = int32(4)
	saramaCreateTopic(t, addr, topic, partitions)
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(v))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	// Half the records before anyone joins, half once both members have.
	first := keyRange("g", 0, 100)
	saramaProduceKeys(t, addr, topic, partitions, first)

	a := startGroupMember(t, v, addr, groupID, topic, "member-a")
	waitFor(t, 15*time.Second, "member-a's first session", func() bool { return a.lastSession() != nil })
	b := startGroupMember(t, v, addr, groupID, topic, "member-b")
	var gen int32
	waitFor(t, 20*time.Second, "a generation with both members", func() bool {
		sb := b.lastSession()
		if sb == nil {
			return false
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.session(sb.generation) == nil {
			return false
		}
		gen = sb.generation
		return true
	})
	a.mu.Lock()
	sa := *a.session(gen)
	a.mu.Unlock()
	b.mu.Lock()
	sb := *b.session(gen)
	b.mu.Unlock()
	t.Logf("generation %d: %s has %v, %s has %v", gen, a.name, sa.claims, b.name, sb.claims)
	if sa.memberID == sb.memberID {
		t.Fatalf("both members have member id %q", sa.memberID)
	}
	if len(sa.claims) == 0 || len(sb.claims) == 0 {
		t.Fatalf("generation %d: a member has no partitions: a %v, b %v", gen, sa.claims, sb.claims)
	}
	owner := map[int32]string{}
	for _, s := range []struct {
		name   string
		claims []int32
	}{{a.name, sa.claims}, {b.name, sb.claims}} {
		for _, p := range s.claims {
			if o, dup := owner[p]; dup {
				t.Fatalf("generation %d: partition %d assigned to both %s and %s", gen, p, o, s.name)
			}
			owner[p] = s.name
		}
	}
	if len(owner) != int(partitions) {
		t.Fatalf("generation %d: assigned partitions %v, want all %d", gen, owner, partitions)
	}

	second := keyRange("g", 100, 200)
	saramaProduceKeys(t, addr, topic, partitions, second)
	all := append(append([]string{}, first...), second...)
	ends := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		ends[p] = int64(len(all)) / int64(partitions)
	}
	seenAll := func() bool {
		for _, k := range all {
			a.mu.Lock()
			na := a.seen[k]
			a.mu.Unlock()
			b.mu.Lock()
			nb := b.seen[k]
			b.mu.Unlock()
			if na+nb == 0 {
				return false
			}
		}
		return true
	}
	committedAll := func() bool {
		got := committedOffsets(t, adm, groupID, topic, partitions)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	}
	waitFor(t, 20*time.Second, "all 200 records delivered and committed", func() bool { return seenAll() && committedAll() })
	// Both consumed concurrently: the second half went to both members.
	for _, m := range []*groupMember{a, b} {
		if s := m.lastSession(); s.records == 0 {
			t.Errorf("%s got no records in generation %d (claims %v)", m.name, s.generation, s.claims)
		}
	}
	a.close(t)
	b.close(t)
	if got := committedOffsets(t, adm, groupID, topic, partitions); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Fatalf("committed offsets after both members left: %v, want %v", got, ends)
	}
	if ds, err := adm.DescribeConsumerGroups([]string{groupID}); err != nil {
		t.Fatalf("DescribeConsumerGroups: %v", err)
	} else if len(ds) != 1 || ds[0].State != "Empty" || len(ds[0].Members) != 0 {
		t.Fatalf("after both members left, DescribeConsumerGroups: %+v, want one Empty group", ds[0])
	}

	// A third member resumes at the committed offsets.
	c := startGroupMember(t, v, addr, groupID, topic, "member-c")
	waitFor(t, 15*time.Second, "member-c's claims to start", func() bool {
		s := c.lastSession()
		if s == nil {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(s.initial) == int(partitions)
	})
	sc := c.lastSession()
	c.mu.Lock()
	if len(sc.claims) != int(partitions) {
		t.Errorf("member-c alone got partitions %v, want all %d", sc.claims, partitions)
	}
	for p, off := range sc.initial {
		if off != ends[p] {
			t.Errorf("member-c starts partition %d at %d, want the committed %d", p, off, ends[p])
		}
	}
	c.mu.Unlock()
	late := keyRange("late", 0, 10)
	saramaProduceKeys(t, addr, topic, partitions, late)
	for i := range late {
		ends[int32(i)%partitions]++
	}
	waitFor(t, 15*time.Second, "member-c to get 10 records", func() bool { return c.seenCount() >= len(late) })
	c.mu.Lock()
	got := append([]string{}, c.order...)
	c.mu.Unlock()
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(late) {
		t.Errorf("member-c got %v, want exactly %v", got, late)
	}
	waitFor(t, 10*time.Second, "member-c's commits", committedAll)

	// Admin API while member-c is in the group.
	groups, err := adm.ListConsumerGroups()
	if err != nil {
		t.Fatalf("ListConsumerGroups: %v", err)
	}
	if pt, ok := groups[groupID]; !ok || pt != "consumer" {
		t.Errorf("ListConsumerGroups: %v, want %s with protocol type consumer", groups, groupID)
	}
	ds, err := adm.DescribeConsumerGroups([]string{groupID})
	if err != nil || len(ds) != 1 {
		t.Fatalf("DescribeConsumerGroups: %v %v", ds, err)
	}
	d := ds[0]
	if d.Err != sarama.ErrNoError || d.GroupId != groupID || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "range" || len(d.Members) != 1 {
		t.Errorf("DescribeConsumerGroups: %+v, want Stable consumer/range group with one member", d)
	}
	for id, md := range d.Members {
		if id != sc.memberID || md.ClientId != "member-c" || md.ClientHost == "" {
			t.Errorf("member %q: client %q host %q, want %q client member-c", id, md.ClientId, md.ClientHost, sc.memberID)
		}
		as, err := md.GetMemberAssignment()
		if err != nil {
			t.Fatalf("member assignment: %v", err)
		}
		if ps := as.Topics[topic]; len(ps) != int(partitions) {
			t.Errorf("member assignment %v, want all %d partitions of %s", as.Topics, partitions, topic)
		}
		meta, err := md.GetMemberMetadata()
		if err != nil || len(meta.Topics) != 1 || meta.Topics[0] != topic {
			t.Errorf("member metadata %+v (%v), want subscription to %s", meta, err, topic)
		}
	}
	if err := adm.DeleteConsumerGroup(groupID); !errors.Is(err, sarama.ErrNonEmptyGroup) {
		t.Errorf("DeleteConsumerGroup of a group with a member: %v, want %v", err, sarama.ErrNonEmptyGroup)
	}
	c.close(t)

	if got := committedOffsets(t, adm, groupID, topic, partitions); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Errorf("committed offsets after member-c left: %v, want %v", got, ends)
	}
	// Whole-group OffsetFetch (no partitions named) lists the same.
	resp, err := adm.ListConsumerGroupOffsets(groupID, nil)
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets(all): %v", err)
	}
	for p, end := range ends {
		if b := resp.GetBlock(topic, p); b == nil || b.Offset != end {
			t.Errorf("ListConsumerGroupOffsets(all) %s/%d: %+v, want offset %d", topic, p, b, end)
		}
	}
	if err := adm.DeleteConsumerGroupOffset(groupID, topic, 0); err != nil {
		t.Errorf("DeleteConsumerGroupOffset: %v", err)
	} else if got := committedOffsets(t, adm, groupID, topic, partitions); got[0] != -1 || got[1] != ends[1] {
		t.Errorf("after DeleteConsumerGroupOffset of partition 0: %v", got)
	}
	if err := adm.DeleteConsumerGroup(groupID); err != nil {
		t.Fatalf("DeleteConsumerGroup: %v", err)
	}
	if groups, err := adm.ListConsumerGroups(); err != nil {
		t.Fatal(err)
	} else if _, ok := groups[groupID]; ok {
		t.Errorf("ListConsumerGroups still lists %s after DeleteConsumerGroup", groupID)
	}
	if got := committedOffsets(t, adm, groupID, topic, partitions); got[1] != -1 || got[2] != -1 {
		t.Errorf("offsets after DeleteConsumerGroup: %v, want none", got)
	}
	if err := adm.DeleteConsumerGroup(groupID); !errors.Is(err, sarama.ErrGroupIDNotFound) {
		t.Errorf("DeleteConsumerGroup of a deleted group: %v, want %v", err, sarama.ErrGroupIDNotFound)
	}
}

// TestSaramaIdempotentProducer: an idempotent sarama producer's records all
// land exactly once, stamped with its producer id.
func TestSaramaIdempotentProducer(t *testing.T) {
	in := startBroker(t)
	saramaLog.set(newTestLog(t, "sarama: "))
	t.Cleanup(func() { saramaLog.set(nil) })
	addr := in.Addr()
	const topic, partitions, n = "sarama-idem", int32(4), 100
	saramaCreateTopic(t, addr, topic, partitions)

	cfg := saramaConfig(sarama.V2_8_0_0)
	saramaIdempotent(cfg)
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Flush.Messages = 7 // several batches per partition
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	prod, err := sarama.NewAsyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		prod.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("idem-%d", i)), Value: sarama.StringEncoder(fmt.Sprint(i))}
	}
	acked := newExpectLog()
	timeout := time.After(15 * time.Second)
	for got := 0; got < n; got++ {
		select {
		case m := <-prod.Successes():
			k, _ := m.Key.Encode()
			acked.add(t, m.Partition, m.Offset, sent{key: k})
		case pe := <-prod.Errors():
			t.Fatalf("produce %v: %v", pe.Msg.Key, pe.Err)
		case <-timeout:
			t.Fatalf("%d of %d records acknowledged", got, n)
		}
	}
	if err := prod.Close(); err != nil {
		t.Fatal(err)
	}
	ends := acked.checkDense(t, partitions)
	if t.Failed() {
		t.FailNow()
	}

	cl := franz(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxTimeout(t, 10*time.Second)
	seen := map[string]int{}
	pids := map[[2]int64]bool{}
	var total int
	for total < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", total, n, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			total++
			seen[string(r.Key)]++
			pids[[2]int64{r.ProducerID, int64(r.ProducerEpoch)}] = true
			if want := acked.parts[r.Partition][r.Offset].key; string(want) != string(r.Key) {
				t.Errorf("%d/%d holds %q, acknowledged for %q", r.Partition, r.Offset, r.Key, want)
			}
		})
	}
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("idem-%d", i); seen[k] != 1 {
			t.Errorf("%s read %d times", k, seen[k])
		}
	}
	if len(pids) != 1 {
		t.Fatalf("records carry producer id/epochs %v, want one", pids)
	}
	var pid int64
	for k := range pids {
		pid = k[0]
	}
	if pid < 0 {
		t.Fatalf("records carry producer id %d: the producer was not idempotent", pid)
	}
	// The broker tracked the producer's sequences on every partition.
	dp, err := kadm.NewClient(cl).DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
	if err != nil {
		t.Fatalf("DescribeProducers: %v", err)
	}
	for p := int32(0); p < partitions; p++ {
		d, ok := dp[topic].Partitions[p]
		if !ok || d.Err != nil {
			t.Errorf("DescribeProducers %s/%d: %+v", topic, p, d)
			continue
		}
		prod, ok := d.ActiveProducers[pid]
		if !ok || len(d.ActiveProducers) != 1 {
			t.Errorf("DescribeProducers %s/%d: producers %+v, want only %d", topic, p, d.ActiveProducers, pid)
			continue
		}
		if int64(prod.LastSequence) != ends[p]-1 {
			t.Errorf("DescribeProducers %s/%d: last sequence %d, want %d", topic, p, prod.LastSequence, ends[p]-1)
		}
	}
}
