package stoatflow

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/stoatflow/internal/crashpoint"
	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// ErrFenced is returned by Run when another instance of the application
// took over: its transactional id was initialised by someone else, so this
// instance may not commit again and stops.
var ErrFenced = errors.New("fenced: another instance of this application took over")

// App is one running instance of an application.
type App struct {
	cfg  Config
	topo *Topology
	subs []*subTopology
	log  *slog.Logger

	prod  *kgo.Client // transactional under exactly-once
	cons  *kgo.Client // input, assigned partitions
	adm   *kadm.Client
	admCl *kgo.Client
	disk  *state.Engine
	mem   *state.Engine

	partitions map[string]int // topic -> partition count
	tasks      []*task
	byInput    map[tp]*task
	// keyPart hashes keys as Kafka's default partitioner does. One
	// instance serves every topic and goroutine: for a keyed record it
	// only hashes (ForTopic per record would seed a new random source
	// each time, which once took half the CPU).
	keyPart kgo.TopicPartitioner
	// outCounters are the records-out counters per topic, looked up once.
	outCounters map[string]prometheus.Counter

	produceErr atomic.Pointer[error]
	produced   atomic.Bool // a sink produced since the last commit
	// prodGen counts producers: a closed producer fails its buffered
	// records on a goroutine of its own, after deactivate cleared
	// produceErr, and such a late failure must not fail the next
	// producer's first commit.
	prodGen    atomic.Int64
	inTxn      bool
	lastCommit time.Time
	sinceCkpt  int64
	lastCkpt   time.Time

	// High availability (nil with ha.mode off): haCheck tells the
	// processing loop to stop (demoted, or handing off); firstCommit
	// records the first commit after a promotion.
	ha          atomic.Pointer[haRuntime] // read by the HTTP handlers
	haCheck     func() error
	firstCommit func()

	// restartRequired says why the pod must be restarted (a source
	// topic's partition count changed), or is empty.
	restartRequired atomic.Pointer[string]

	metrics *metrics
	ready   atomic.Bool
	running atomic.Bool
	httpMu  sync.Mutex
	httpErr error
	httpURL string
	restore restoreProgress
}

// Option changes how New builds an App.
type Option func(*App)

// WithLogger sets the logger (default: JSON lines on stderr at info).
func WithLogger(l *slog.Logger) Option { return func(a *App) { a.log = l } }

// New checks the configuration and the topology. Nothing connects until
// Run.
func New(cfg Config, topo *Topology, opts ...Option) (*App, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subs, err := topo.compile()
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	a := &App{cfg: cfg, topo: topo, subs: subs, keyPart: kgo.StickyKeyPartitioner(nil).ForTopic("")}
	for _, o := range opts {
		o(a)
	}
	if a.log == nil {
		a.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	a.log = a.log.With("app", cfg.ApplicationID)
	a.metrics = newMetrics(a)
	return a, nil
}

func (a *App) exactlyOnce() bool { return a.cfg.ProcessingGuarantee == ExactlyOnce }

// topicName is the Kafka topic behind a name in the topology: internal
// topics are prefixed with the application id.
func (a *App) topicName(name string, internal bool) string {
	if internal {
		return a.cfg.ApplicationID + "-" + name
	}
	return name
}

func (a *App) changelogTopic(s *storeSpec) string {
	return a.cfg.ApplicationID + "-" + s.name + "-changelog"
}

func (a *App) positionsTopic() string { return a.cfg.ApplicationID + "-positions" }

func (a *App) transactionalID() string { return a.cfg.ApplicationID + "-stoatflow" }

func (a *App) engineFor(s *storeSpec) *state.Engine {
	if s.memory {
		return a.mem
	}
	return a.disk
}

func (a *App) clientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(a.cfg.BootstrapServers...),
		kgo.ClientID("stoatflow-" + a.cfg.ApplicationID),
		kgo.WithLogger(kgoLogger{a.log}),
	}
	tc, err := a.cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if via := crashpoint.BrokerVia(); via != nil {
		opts = append(opts, kgo.Dialer(viaDialer(via, tc)))
	} else if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch s := a.cfg.SASL; s.Mechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// viaDialer dials the broker addresses through the test's proxies (see
// crashpoint.BrokerVia), with TLS on top when configured.
func viaDialer(via map[string]string, tc *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		addr := host
		if to, ok := via[host]; ok {
			addr = to
		}
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
		if err != nil || tc == nil {
			return c, err
		}
		cfg := tc.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(host)
		}
		return tls.Client(c, cfg), nil
	}
}

// Run processes until ctx ends (a clean stop: the last work is committed)
// or a fatal error. It returns ErrFenced (wrapped) when another instance
// took over.
func (a *App) Run(ctx context.Context) (err error) {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("stoatflow: Run called twice")
	}
	stopHTTP, err := a.startHTTP()
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := a.prepare(ctx); err != nil {
		a.close()
		return err
	}
	defer a.close()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); a.watchPartitions(wctx) }()
	defer func() { stopWatch(); <-watched }()
	if a.cfg.HA.Mode == "active-standby" {
		return a.runHA(ctx)
	}
	if err := a.activate(ctx); err != nil {
		return err
	}
	a.log.Info("stoatflow running", "guarantee", a.cfg.ProcessingGuarantee, "tasks", len(a.tasks), "threads", a.cfg.Threads)
	err = a.loop(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	if err == nil {
		// A clean stop commits what was processed and checkpoints, so the
		// next start replays nothing.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cerr := a.commit(cctx); cerr != nil {
			return fmt.Errorf("final commit: %w", cerr)
		}
		if cerr := a.checkpoint(); cerr != nil {
			return cerr
		}
		a.log.Info("stoatflow stopped cleanly")
	}
	return err
}

// prepare opens the local engines, connects and creates or checks the
// topics.
func (a *App) prepare(ctx context.Context) error {
	var err error
	if a.disk, err = state.OpenDisk(state.DiskDir(a.cfg.State.Dir, a.cfg.ApplicationID)); err != nil {
		if strings.Contains(err.Error(), "lock") {
			return fmt.Errorf("%w: is another instance of %s running with the same stoatflow.state.dir?", err, a.cfg.ApplicationID)
		}
		return err
	}
	if a.mem, err = state.OpenMemory(); err != nil {
		return err
	}
	base, err := a.clientOpts()
	if err != nil {
		return err
	}
	// The admin client's metadata may not be cached for long: the start
	// polls for topics it just created, and a 5 s cache (franz-go's
	// default) made every first start wait that long.
	admCl, err := kgo.NewClient(append(base, kgo.MetadataMinAge(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	a.admCl, a.adm = admCl, kadm.NewClient(admCl)
	if err := a.prepareTopics(ctx); err != nil {
		return err
	}
	a.outCounters = map[string]prometheus.Counter{}
	for t := range a.partitions {
		a.outCounters[t] = a.metrics.recordsOut.WithLabelValues(t)
	}
	return nil
}

// activate makes this instance the one that processes: it fences any
// earlier instance, restores the stores to what was committed and
// positions the input.
func (a *App) activate(ctx context.Context) error {
	base, err := a.clientOpts()
	if err != nil {
		return err
	}
	popts := append(append([]kgo.Opt{}, base...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(10),
	)
	if a.exactlyOnce() {
		popts = append(popts, kgo.TransactionalID(a.transactionalID()), kgo.TransactionTimeout(10*time.Second))
	}
	if a.prod, err = kgo.NewClient(popts...); err != nil {
		return err
	}
	if a.exactlyOnce() {
		// InitProducerId bumps the epoch: an earlier instance is fenced
		// and its open transaction aborted before anything is read, so
		// the changelogs' high watermarks are final and read_committed
		// reaches them.
		id, epoch, err := a.prod.ProducerID(ctx)
		if err != nil {
			return fmt.Errorf("initialise the transactional producer %s: %w", a.transactionalID(), err)
		}
		a.log.Info("transactional producer ready; any earlier instance is fenced", "transactional_id", a.transactionalID(), "producer_id", id, "epoch", epoch)
	}
	return a.recover(ctx)
}

// recover brings local state and input positions to what Kafka committed:
// at start, and after an aborted transaction (whose local buffers were
// dropped, and whose commit may or may not have landed).
func (a *App) recover(ctx context.Context) error {
	a.ready.Store(false)
	for _, t := range a.tasks {
		for _, x := range t.txns {
			x.Close()
		}
	}
	a.tasks, a.byInput = nil, map[tp]*task{}
	a.metrics.resetPending()
	if err := a.restoreAll(ctx); err != nil {
		return err
	}
	positions, err := a.fetchPositions(ctx)
	if err != nil {
		return err
	}
	for _, sub := range a.subs {
		for p := 0; p < sub.partitions; p++ {
			t, err := a.newTask(sub, int32(p))
			if err != nil {
				return err
			}
			for _, topic := range sub.topics {
				in := tp{a.topicName(topic, a.isInternal(sub, topic)), int32(p)}
				t.positions[in] = positions[in]
				t.committed[in] = positions[in]
				t.queues[in] = nil
				a.byInput[in] = t
			}
			a.tasks = append(a.tasks, t)
		}
	}
	assign := map[string]map[int32]kgo.Offset{}
	for in, t := range a.byInput {
		if assign[in.topic] == nil {
			assign[in.topic] = map[int32]kgo.Offset{}
		}
		off := t.positions[in]
		if off < 0 {
			assign[in.topic][in.partition] = kgo.NewOffset().AtStart()
		} else {
			assign[in.topic][in.partition] = kgo.NewOffset().At(off)
		}
	}
	if a.cons != nil {
		a.cons.Close()
	}
	base, err := a.clientOpts()
	if err != nil {
		return err
	}
	copts := append(base, kgo.ConsumePartitions(assign), kgo.FetchMaxWait(100*time.Millisecond))
	if a.exactlyOnce() {
		copts = append(copts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if a.cons, err = kgo.NewClient(copts...); err != nil {
		return err
	}
	if a.exactlyOnce() && !a.inTxn {
		if err := a.prod.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		a.inTxn = true
	}
	a.lastCommit = time.Now()
	a.ready.Store(true)
	return nil
}

func (a *App) isInternal(sub *subTopology, topic string) bool {
	for _, n := range sub.sources {
		for _, t := range n.source.topics {
			if t == topic {
				return n.source.internal
			}
		}
	}
	return false
}

// fetchPositions reads the committed input positions of the group named
// after the application, waiting out offsets still pending in a
// transaction (RequireStable). A partition without one is -1 (from the
// start).
func (a *App) fetchPositions(ctx context.Context) (map[tp]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = a.cfg.ApplicationID
	req.RequireStable = true
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = a.cfg.ApplicationID
	req.Groups = append(req.Groups, rg)
	for {
		out := map[tp]int64{}
		shards := a.admCl.RequestSharded(ctx, req)
		var retry, fatal error
		for _, sh := range shards {
			if sh.Err != nil {
				retry = sh.Err
				continue
			}
			resp := sh.Resp.(*kmsg.OffsetFetchResponse)
			code := resp.ErrorCode
			topics := resp.Topics
			if len(resp.Groups) > 0 {
				code = resp.Groups[0].ErrorCode
				for _, t := range resp.Groups[0].Topics {
					rt := kmsg.OffsetFetchResponseTopic{Topic: t.Topic}
					for _, p := range t.Partitions {
						rt.Partitions = append(rt.Partitions, kmsg.OffsetFetchResponseTopicPartition{Partition: p.Partition, Offset: p.Offset, ErrorCode: p.ErrorCode})
					}
					topics = append(topics, rt)
				}
			}
			if err := kerr.ErrorForCode(code); err != nil {
				if kerr.IsRetriable(err) {
					retry = err
					continue
				}
				fatal = err
				continue
			}
			for _, t := range topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						if kerr.IsRetriable(err) {
							retry = err
						} else {
							fatal = err
						}
						continue
					}
					out[tp{t.Topic, p.Partition}] = p.Offset
				}
			}
		}
		if fatal != nil {
			return nil, fmt.Errorf("read committed positions of group %s: %w", a.cfg.ApplicationID, fatal)
		}
		if retry == nil {
			for k := range a.byInputTopics() {
				if _, ok := out[k]; !ok {
					out[k] = -1
				}
			}
			return out, nil
		}
		a.log.Info("waiting for the committed positions to become stable", "err", retry)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// byInputTopics lists every input partition.
func (a *App) byInputTopics() map[tp]bool {
	out := map[tp]bool{}
	for _, sub := range a.subs {
		for _, topic := range sub.topics {
			for p := 0; p < sub.partitions; p++ {
				out[tp{a.topicName(topic, a.isInternal(sub, topic)), int32(p)}] = true
			}
		}
	}
	return out
}

// produce sends a record inside the current transaction; partition -1
// hashes the key as Kafka's default partitioner does.
func (a *App) produce(r *kgo.Record, partition int32) {
	if partition < 0 {
		n := a.partitions[r.Topic]
		if r.Key == nil {
			partition = int32(time.Now().UnixNano() % int64(n))
		} else {
			partition = int32(a.keyPart.Partition(r, n))
		}
	}
	r.Partition = partition
	a.produced.Store(true)
	if c := a.outCounters[r.Topic]; c != nil {
		c.Inc()
	}
	gen := a.prodGen.Load()
	a.prod.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		if err != nil {
			e := fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, err)
			a.produceFailed(gen, &e)
		}
	})
}

// loop polls input, processes it in rounds and commits on the interval.
func (a *App) loop(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.haCheck != nil {
			if err := a.haCheck(); err != nil {
				return err
			}
		}
		wait := time.Until(a.lastCommit.Add(a.cfg.CommitInterval))
		wait = min(max(wait, 5*time.Millisecond), 200*time.Millisecond)
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := a.cons.PollRecords(pctx, 20000)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("input consumer closed")
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			a.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			if ferr == nil && !kerr.IsRetriable(err) {
				var ke *kerr.Error
				if errors.As(err, &ke) {
					ferr = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
				}
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			in := tp{p.Topic, p.Partition}
			t := a.byInput[in]
			if t == nil {
				return
			}
			t.queues[in] = append(t.queues[in], p.Records...)
		})
		if err := a.round(); err != nil {
			return err
		}
		if time.Since(a.lastCommit) >= a.cfg.CommitInterval {
			if err := a.commitOrRecover(ctx); err != nil {
				return err
			}
		}
	}
}

// round processes every task's queue on the configured goroutines and
// waits for them: between rounds nothing processes, so a commit sees a
// consistent cut.
func (a *App) round() error {
	wall := time.Now().UnixMilli()
	if a.cfg.Threads <= 1 || len(a.tasks) <= 1 {
		for _, t := range a.tasks {
			if err := t.run(wall); err != nil {
				return fmt.Errorf("task %s: %w", t.id, err)
			}
		}
		return nil
	}
	errs := make([]error, a.cfg.Threads)
	var wg sync.WaitGroup
	for w := 0; w < a.cfg.Threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(a.tasks); i += a.cfg.Threads {
				if err := a.tasks[i].run(wall); err != nil {
					errs[w] = fmt.Errorf("task %s: %w", a.tasks[i].id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commitOrRecover commits; a failed transaction is aborted and the
// instance resumes from what Kafka holds. Being fenced is fatal.
func (a *App) commitOrRecover(ctx context.Context) error {
	if a.haCheck != nil {
		// Under at-least-once the promotion token is the fence: a pod
		// that has seen another's claim commits nothing more.
		if err := a.haCheck(); err != nil {
			return err
		}
	}
	err := a.commit(ctx)
	if err == nil {
		return a.maybeCheckpoint()
	}
	if errors.Is(err, ErrFenced) || ctx.Err() != nil {
		return err
	}
	a.metrics.aborts.Inc()
	a.log.Warn("commit failed; aborting and resuming from the last commit", "err", err)
	if a.exactlyOnce() {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := a.prod.AbortBufferedRecords(actx); err != nil {
			return fmt.Errorf("abort buffered records: %w", err)
		}
		if err := a.prod.EndTransaction(actx, kgo.TryAbort); err != nil {
			if fenced(err) {
				return fmt.Errorf("%w (%v)", ErrFenced, err)
			}
			return fmt.Errorf("abort transaction: %w", err)
		}
		a.inTxn = false
	}
	a.produceErr.Store(nil)
	return a.recover(ctx)
}

func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.InvalidProducerIDMapping)
}

// commit writes the changelog records of every task's buffered writes, the
// input positions and (exactly-once) ends the transaction; then, and only
// then, applies the buffered writes to the local stores.
func (a *App) commit(ctx context.Context) error {
	start := time.Now()
	for _, t := range a.tasks {
		if err := t.flushCaches(); err != nil {
			return err
		}
	}
	offsets := map[string]map[int32]int64{}
	moved := a.produced.Swap(false)
	for _, t := range a.tasks {
		for in, off := range t.positions {
			if off < 0 {
				continue
			}
			if off != t.committed[in] {
				moved = true
			}
			if offsets[in.topic] == nil {
				offsets[in.topic] = map[int32]int64{}
			}
			offsets[in.topic][in.partition] = off
		}
	}
	if !moved && !a.anyDirty() {
		a.lastCommit = time.Now()
		return nil
	}
	crashpoint.Hit(crashpoint.BeforeProduce)
	for _, t := range a.tasks {
		for _, h := range t.stores {
			for _, k := range h.dirtyKeys() {
				h := h
				rec := &kgo.Record{Topic: h.topic, Partition: t.partition, Key: []byte(k), Value: h.dirty[k], Timestamp: time.Now()}
				gen := a.prodGen.Load()
				a.prod.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
					if err != nil {
						e := fmt.Errorf("changelog %s/%d: %w", r.Topic, r.Partition, err)
						a.produceFailed(gen, &e)
						return
					}
					// Promises run one at a time, in order per partition.
					if r.Offset > h.clOffset {
						h.clOffset = r.Offset
					}
				})
			}
		}
	}
	if a.exactlyOnce() {
		// The marker guarantees the transaction holds a record, without
		// which franz-go would not end it; it also keeps the positions
		// with the data for anyone replaying the log.
		b, _ := json.Marshal(flatOffsets(offsets))
		gen := a.prodGen.Load()
		a.prod.Produce(context.Background(), &kgo.Record{Topic: a.positionsTopic(), Key: []byte("positions"), Value: b, Partition: 0}, func(r *kgo.Record, err error) {
			if err != nil {
				e := fmt.Errorf("positions marker: %w", err)
				a.produceFailed(gen, &e)
			}
		})
	}
	if err := a.prod.Flush(ctx); err != nil {
		return err
	}
	if e := a.produceErr.Load(); e != nil {
		if fenced(*e) {
			return fmt.Errorf("%w (%v)", ErrFenced, *e)
		}
		return *e
	}
	if a.exactlyOnce() {
		if err := a.commitTxnOffsets(ctx, offsets); err != nil {
			if fenced(err) {
				return fmt.Errorf("%w (%v)", ErrFenced, err)
			}
			return err
		}
		crashpoint.Hit(crashpoint.BeforeCommit)
		if err := crashpoint.Fail(crashpoint.BeforeCommit); err != nil {
			return err
		}
		if err := a.prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			if fenced(err) {
				return fmt.Errorf("%w (%v)", ErrFenced, err)
			}
			return fmt.Errorf("commit transaction: %w", err)
		}
		a.inTxn = false
	} else {
		commits := kadm.Offsets{}
		for topic, ps := range offsets {
			for p, off := range ps {
				commits.Add(kadm.Offset{Topic: topic, Partition: p, At: off, LeaderEpoch: -1})
			}
		}
		resp, err := a.adm.CommitOffsets(ctx, a.cfg.ApplicationID, commits)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("commit positions: %w", err)
		}
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	applied := int64(0)
	for _, t := range a.tasks {
		for _, h := range t.stores {
			if h.clOffset >= 0 {
				h.txn.SetOffset(h.part, h.clOffset)
			}
			applied += int64(len(h.dirty))
		}
		for _, x := range t.txns {
			if err := x.Apply(); err != nil {
				return fmt.Errorf("apply committed writes to the local store: %w", err)
			}
		}
		for _, h := range t.stores {
			clear(h.dirty)
			h.clOffset = -1
		}
		for in, off := range t.positions {
			t.committed[in] = off
		}
	}
	a.metrics.resetPending()
	a.sinceCkpt += applied
	if a.exactlyOnce() {
		if err := a.prod.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		a.inTxn = true
	}
	if a.firstCommit != nil {
		a.firstCommit()
		a.firstCommit = nil
	}
	a.metrics.commits.Inc()
	a.metrics.commitLatency.Observe(time.Since(start).Seconds())
	a.lastCommit = time.Now()
	return nil
}

func (a *App) anyDirty() bool {
	for _, t := range a.tasks {
		for _, h := range t.stores {
			if len(h.dirty) > 0 {
				return true
			}
		}
	}
	return false
}

func flatOffsets(o map[string]map[int32]int64) map[string]int64 {
	out := map[string]int64{}
	for t, ps := range o {
		for p, off := range ps {
			out[fmt.Sprintf("%s/%d", t, p)] = off
		}
	}
	return out
}

// commitTxnOffsets adds the input positions to the open transaction as a
// standalone (generation -1) commit of the application's group: StoatFlow
// is not a group member, and franz-go sends transactional offset commits
// only for a group it consumes in.
func (a *App) commitTxnOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	id, epoch, err := a.prod.ProducerID(ctx)
	if err != nil {
		return err
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = a.transactionalID(), id, epoch, a.cfg.ApplicationID
	for attempt := 0; ; attempt++ {
		resp, err := add.RequestWith(ctx, a.prod)
		if err != nil {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) && !kerr.IsRetriable(err) || attempt > 50 {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = a.transactionalID(), a.cfg.ApplicationID, id, epoch
	req.Generation, req.MemberID = -1, ""
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, off := range offsets[topic] {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, off, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	for attempt := 0; ; attempt++ {
		resp, err := req.RequestWith(ctx, a.prod)
		if err != nil {
			return fmt.Errorf("transactional offset commit: %w", err)
		}
		var perr error
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && perr == nil {
					perr = fmt.Errorf("transactional offset commit %s/%d: %w", t.Topic, p.Partition, e)
				}
			}
		}
		if perr == nil {
			return nil
		}
		if !kerr.IsRetriable(perr) || attempt > 50 {
			return perr
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// maybeCheckpoint flushes the local stores once enough records or time
// have passed: what a restart after a crash replays is bounded by it.
func (a *App) maybeCheckpoint() error {
	if a.lastCkpt.IsZero() {
		a.lastCkpt = time.Now()
	}
	if a.sinceCkpt < a.cfg.State.SegmentCheckpointRecords && time.Since(a.lastCkpt) < a.cfg.State.SegmentCheckpointInterval {
		return nil
	}
	if a.sinceCkpt == 0 {
		a.lastCkpt = time.Now()
		return nil
	}
	return a.checkpoint()
}

func (a *App) checkpoint() error {
	start := time.Now()
	if err := a.disk.Flush(func() { crashpoint.Hit(crashpoint.MidCheckpoint) }); err != nil {
		return fmt.Errorf("checkpoint the local stores: %w", err)
	}
	a.log.Debug("checkpoint", "records", a.sinceCkpt, "took", time.Since(start))
	a.metrics.checkpoints.Inc()
	a.sinceCkpt, a.lastCkpt = 0, time.Now()
	return nil
}

// deactivate stops processing without committing: the buffers are
// dropped and the clients closed. A demoted active (another pod holds the
// token) ends here; whatever it had not committed is aborted by its
// successor's fence.
func (a *App) deactivate() {
	a.ready.Store(false)
	if a.cons != nil {
		a.cons.Close()
		a.cons = nil
	}
	if a.prod != nil {
		a.prodGen.Add(1)
		a.prod.Close()
		a.prod = nil
	}
	for _, t := range a.tasks {
		for _, x := range t.txns {
			x.Close()
		}
	}
	a.tasks, a.byInput, a.inTxn = nil, nil, false
	a.produceErr.Store(nil)
	a.produced.Store(false)
	a.metrics.resetPending()
}

func (a *App) close() {
	a.ready.Store(false)
	if a.cons != nil {
		a.cons.Close()
	}
	if a.prod != nil {
		a.prod.Close()
	}
	if a.adm != nil {
		a.adm.Close()
	}
	for _, t := range a.tasks {
		for _, x := range t.txns {
			x.Close()
		}
	}
	if a.disk != nil {
		a.disk.Close()
	}
	if a.mem != nil {
		a.mem.Close()
	}
}

// kgoLogger sends franz-go's warnings and errors to the application log.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (k kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error("kafka client: "+msg, kv...)
	default:
		k.l.Warn("kafka client: "+msg, kv...)
	}
}

// watchPartitions checks every 10 s that the source topics keep the
// partition counts the tasks were built for. A changed count sets
// restartRequired: /health/live fails, so Kubernetes (or systemd's
// Restart=always, after the process exits on its liveness) recycles the
// pod, and the new start rebuilds its tasks for the new count.
func (a *App) watchPartitions(ctx context.Context) {
	sources := map[string]int{}
	for _, n := range a.topo.nodes {
		if n.source != nil && !n.source.internal {
			for _, t := range n.source.topics {
				sources[t] = a.partitions[t]
			}
		}
	}
	var names []string
	for t := range sources {
		names = append(names, t)
	}
	sort.Strings(names)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(partitionWatchInterval):
		}
		md, err := a.adm.ListTopics(ctx, names...)
		if err != nil {
			continue
		}
		for _, t := range names {
			if d, ok := md[t]; ok && d.Err == nil && len(d.Partitions) != sources[t] {
				why := fmt.Sprintf("source topic %s has %d partitions, the tasks were built for %d: restart to rebuild them", t, len(d.Partitions), sources[t])
				if a.restartRequired.Load() == nil {
					a.log.Error("restart required", "why", why)
				}
				a.restartRequired.Store(&why)
			}
		}
	}
}

// partitionWatchInterval is a variable so that no test waits 10 s for it.
var partitionWatchInterval = func() time.Duration {
	if ms, err := strconv.Atoi(os.Getenv("STOATFLOW_TEST_PARTITION_WATCH_MS")); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 10 * time.Second
}()

// produceFailed records the first produce error of the current producer.
func (a *App) produceFailed(gen int64, err *error) {
	if gen == a.prodGen.Load() {
		a.produceErr.CompareAndSwap(nil, err)
	}
}
