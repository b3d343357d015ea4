package stoatflow

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// Topology is the graph an application runs: sources, processors, stores
// and sinks. The DSL functions (Stream, Map, GroupBy, ...) and Process add
// to it; New checks and compiles it.
type Topology struct {
	nodes  []*node
	stores map[string]*storeSpec
	order  []string // store names in declaration order
	names  map[string]int
	errs   []error
}

// NewTopology starts an empty topology.
func NewTopology() *Topology {
	return &Topology{stores: map[string]*storeSpec{}, names: map[string]int{}}
}

func (t *Topology) fail(format string, args ...any) {
	t.errs = append(t.errs, fmt.Errorf(format, args...))
}

// name returns the given name, or a generated one for the kind.
func (t *Topology) name(given, kind string) string {
	if given != "" {
		return given
	}
	t.names[kind]++
	return fmt.Sprintf("%s-%04d", kind, t.names[kind])
}

// record is a record inside the graph: key and value are the typed values
// of the stream they travel on.
type record struct {
	key, value any
	ts         int64 // milliseconds since the epoch
	headers    []kgo.RecordHeader
}

// nodeProc is a processor instance of one task.
type nodeProc interface {
	init(pc *procCtx) error
	process(r record) error
}

type node struct {
	name     string
	kind     string
	parents  []*node
	children []*node
	stores   []string
	make     func() nodeProc // processors
	source   *sourceSpec
	sink     *sinkSpec
	sub      int // sub-topology, set by compile
}

type sourceSpec struct {
	topics   []string
	key, val anySerde
	ts       func(r *kgo.Record) int64
	internal bool // a repartition topic this application writes
	// readerSized marks an internal topic that gets the partition count
	// of the sub-topology reading it instead of the one writing it: the
	// foreign-key join's subscription and response topics, whose writer
	// and reader are not co-partitioned.
	readerSized bool
}

type sinkSpec struct {
	topic    string
	key, val anySerde
	internal bool
	// partitionOf picks the partition of a record from its encoded key
	// and its value in the graph, for a topic of n partitions; nil hashes
	// the key as Kafka's default partitioner does. The foreign-key join's
	// responses go back to the partition their subscription came from.
	partitionOf func(key []byte, value any, n int) int32
}

func (t *Topology) addNode(name, kind string, parents ...*node) *node {
	n := &node{name: t.name(name, kind), kind: kind, parents: parents}
	for _, o := range t.nodes {
		if o.name == n.name {
			t.fail("two processors are named %q", n.name)
		}
	}
	for _, p := range parents {
		p.children = append(p.children, n)
	}
	t.nodes = append(t.nodes, n)
	return n
}

type storeKind string

const (
	kindKeyValue storeKind = "key-value"
	kindWindow   storeKind = "window"
	kindSession  storeKind = "session"
)

type storeSpec struct {
	name      string
	kind      storeKind
	keySerde  any // Serde[K]
	valSerde  any // Serde[V]
	keyAny    anySerde
	valAny    anySerde
	types     string
	memory    bool
	changelog bool
	// Window and session stores: how long data is kept behind stream
	// time, and the window size (window stores).
	retention time.Duration
	window    time.Duration
	// rawKey, when set, prints a stored key for interactive queries (the
	// window and session stores' composite keys).
	decodeKey func([]byte) (any, error)
	// sweep, when set, drops what a restore brought back although the
	// restored state says it is expired (window and session stores).
	sweep func(p *state.Partition) error
	// hasMeta marks a store whose keys from 0xff on are its own
	// bookkeeping (window, session and suppression stores), not data.
	hasMeta bool
	sub     int
}

// StoreOption changes a store's defaults.
type StoreOption func(*storeSpec)

// InMemory keeps the store in memory (a Pebble engine on an in-memory
// filesystem): nothing survives a restart, which restores it from the
// changelog's start.
func InMemory() StoreOption { return func(s *storeSpec) { s.memory = true } }

func (t *Topology) addStore(name string, kind storeKind, ks, vs any, ka, va anySerde, types string, opts []StoreOption) *storeSpec {
	if name == "" || strings.ContainsAny(name, "\x00/") {
		t.fail("store name %q: must be non-empty without '/' or NUL", name)
	}
	if _, dup := t.stores[name]; dup {
		t.fail("two stores are named %q", name)
	}
	s := &storeSpec{name: name, kind: kind, keySerde: ks, valSerde: vs, keyAny: ka, valAny: va, types: types, changelog: true}
	for _, o := range opts {
		o(s)
	}
	t.stores[name] = s
	t.order = append(t.order, name)
	return s
}

// AddKeyValueStore declares a key-value store that processors may connect
// to by name.
func AddKeyValueStore[K, V any](t *Topology, name string, ks Serde[K], vs Serde[V], opts ...StoreOption) {
	t.addStore(name, kindKeyValue, ks, vs, erase(ks), erase(vs), fmt.Sprintf("%T to %T", *new(K), *new(V)), opts)
}

// subTopology is a connected part of the graph: its sources share
// partitioning, and one task per partition runs it.
type subTopology struct {
	id         int
	nodes      []*node
	sources    []*node
	topics     []string // every source topic
	stores     []*storeSpec
	partitions int
}

// compile splits the graph into sub-topologies. Nodes are connected by
// edges except where a repartition topic sits between them, and by the
// stores they share.
func (t *Topology) compile() ([]*subTopology, error) {
	if len(t.errs) > 0 {
		return nil, errors.Join(t.errs...)
	}
	if len(t.nodes) == 0 {
		return nil, errors.New("the topology is empty: add a source with Stream or Table")
	}
	parent := map[*node]*node{}
	var find func(*node) *node
	find = func(n *node) *node {
		if parent[n] == nil || parent[n] == n {
			parent[n] = n
			return n
		}
		r := find(parent[n])
		parent[n] = r
		return r
	}
	union := func(a, b *node) { parent[find(a)] = find(b) }
	users := map[string][]*node{}
	for _, n := range t.nodes {
		find(n)
		for _, p := range n.parents {
			union(n, p)
		}
		for _, s := range n.stores {
			if t.stores[s] == nil {
				return nil, fmt.Errorf("processor %s uses store %q, which no AddKeyValueStore (or aggregation) declared", n.name, s)
			}
			users[s] = append(users[s], n)
		}
	}
	for _, ns := range users {
		for _, n := range ns[1:] {
			union(n, ns[0])
		}
	}
	byRoot := map[*node]*subTopology{}
	var subs []*subTopology
	for _, n := range t.nodes {
		r := find(n)
		st := byRoot[r]
		if st == nil {
			st = &subTopology{id: len(subs)}
			byRoot[r] = st
			subs = append(subs, st)
		}
		n.sub = st.id
		st.nodes = append(st.nodes, n)
		if n.source != nil {
			st.sources = append(st.sources, n)
			st.topics = append(st.topics, n.source.topics...)
		}
	}
	for _, name := range t.order {
		s := t.stores[name]
		if len(users[name]) == 0 {
			continue // declared but unused
		}
		s.sub = users[name][0].sub
		subs[s.sub].stores = append(subs[s.sub].stores, s)
	}
	seen := map[string]int{}
	for _, st := range subs {
		if len(st.sources) == 0 {
			return nil, fmt.Errorf("processors %s read from no source", st.nodes[0].name)
		}
		for _, tp := range st.topics {
			if o, dup := seen[tp]; dup && o != st.id {
				return nil, fmt.Errorf("topic %s is read by two unconnected parts of the topology; read it once and branch", tp)
			}
			seen[tp] = st.id
		}
		sort.Strings(st.topics)
	}
	return subs, nil
}

// Describe prints the compiled topology, one sub-topology per paragraph.
func (t *Topology) Describe() string {
	subs, err := t.compile()
	if err != nil {
		return "invalid topology: " + err.Error()
	}
	var b strings.Builder
	for _, st := range subs {
		fmt.Fprintf(&b, "sub-topology %d: sources %s\n", st.id, strings.Join(st.topics, ", "))
		for _, n := range st.nodes {
			var kids []string
			for _, c := range n.children {
				kids = append(kids, c.name)
			}
			line := fmt.Sprintf("  %s (%s)", n.name, n.kind)
			if len(n.stores) > 0 {
				line += " stores " + strings.Join(n.stores, ",")
			}
			if n.sink != nil {
				line += " -> topic " + n.sink.topic
			}
			if len(kids) > 0 {
				line += " -> " + strings.Join(kids, ", ")
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
