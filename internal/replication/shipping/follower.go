package shipping

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/parallel"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
)

// ReplicaLog is what the follower side needs of one partition's log;
// *storage.Log implements it.
type ReplicaLog interface {
	// AppendReplica appends a batch fetched from the leader at its own
	// base offset and epoch.
	AppendReplica(batch []byte) error
	// Truncate removes every record at or after offset.
	Truncate(offset int64) error
	// TruncateFullyAndStartAt empties the log and restarts it at offset.
	TruncateFullyAndStartAt(offset int64) error
	// AllowGaps lets AppendReplica leave offset gaps before batches whose
	// base offset is below below (the leader's compaction removed whole
	// batches there); it is durable before it returns.
	AllowGaps(below int64) error
	// Sync fsyncs the log and returns its durable end.
	Sync() (int64, error)
	// StartOffset is the log start offset.
	StartOffset() int64
	// EndOffset is the log end offset.
	EndOffset() int64
	// DurableEnd is the offset below which every record is fsynced.
	DurableEnd() int64
	// DropCache evicts the log's durable bytes from the page cache except
	// the newest keep bytes (storage.Log.DropCache).
	DropCache(keep int64)
	// LatestEpoch is the newest epoch in the history, or -1.
	LatestEpoch() int32
	// EpochHistory is the leader-epoch history, oldest first.
	EpochHistory() []storage.EpochEntry
	// StartEpoch persists that epoch starts at offset at, the log's end,
	// ahead of the append of its first batch (storage.Log.StartEpoch).
	StartEpoch(epoch int32, at int64) error
}

// Sink is the follower's side of log shipping, implemented by the broker.
// The Follower calls it from its own goroutine only, never concurrently.
type Sink interface {
	// Topics lists the local topics with the incarnation ids they were
	// created with.
	Topics() []TopicInfo
	// CreateTopic creates t with its partitions (empty logs) and configs.
	CreateTopic(t TopicInfo) error
	// DeleteTopic drops a topic and its data.
	DeleteTopic(name string) error
	// CreatePartitions grows a topic to count partitions; the existing
	// ones are kept.
	CreatePartitions(name string, count int32) error
	// SetConfigs replaces a topic's configs.
	SetConfigs(name string, configs map[string]string) error
	// SetMetaIndex records a topic's TopicInfo.MetaIndex.
	SetMetaIndex(name string, index uint64) error
	// Partition returns the local log of tp.
	Partition(tp replication.TopicPartition) (ReplicaLog, bool)
	// LeaderPosition reports the leader's high watermark and log start
	// of tp, as of the last fetch (for the follower's own high watermark
	// and retention). It must be cheap.
	LeaderPosition(tp replication.TopicPartition, highWatermark, logStart int64)
	// EpochCeiling is the highest leader epoch a batch of tp shipped
	// under the group's epoch may carry: epoch itself, unless partitions
	// carry epochs of their own above the group's (a cluster's partition
	// moved in from another group keeps its epochs rising).
	EpochCeiling(tp replication.TopicPartition, epoch int32) int32
}

// LogSyncer may be implemented by a Sink whose logs share a filesystem
// that can be synced whole (syncfs(2)): the Follower then makes the logs
// one fetch answer appended to durable with one SyncLogs call instead of
// one fsync each, as the leader's group commit does. Every fsync pays for
// a device flush of its own, and the next fetch, which reports the
// durable positions the high watermark waits for, waits for the last one.
type LogSyncer interface {
	// SyncLogs makes each log durable to its end, as its Sync would, and
	// returns each log's error in order.
	SyncLogs(logs []ReplicaLog) []error
}

// EpochStarter may be implemented by a Sink whose logs share a filesystem
// that can be synced whole: the Follower then persists the epoch starts
// one fetch answer begins on many partitions (the first after a failover)
// with one StartEpochs call, one volume sync in all, instead of an fsync
// per log.
type EpochStarter interface {
	// StartEpochs persists each start as its log's StartEpoch would, and
	// returns each one's error in order.
	StartEpochs(starts []EpochStart) []error
}

// EpochStart is one log's epoch start: Epoch begins at offset At, the
// log's end.
type EpochStart struct {
	Log   ReplicaLog
	Epoch int32
	At    int64
}

// FollowerConfig configures a Follower.
type FollowerConfig struct {
	// ReplicaID is this replica's id, sent with every fetch.
	ReplicaID int32
	// Token is the replication bearer token ("" for none).
	Token string
	// Client is the HTTP client; nil selects one with dial and header
	// timeouts. Requests are bounded by contexts either way.
	Client *http.Client
	// TLS, when set, is the client side of the replication port's TLS
	// (Replication.TLS): it verifies the leader's certificate and offers
	// this replica's when the leader requires one. It is used by the
	// client selected when Client is nil, and leader addresses given as
	// host:port are dialled with https.
	TLS *tls.Config
	// MaxBytes bounds the record bytes asked for per fetch (default 8 MiB).
	MaxBytes int32
	// CacheKeep is how many of each partition's newest durable bytes stay
	// in the page cache after an append (default 1 MiB); older ones are
	// dropped, since a follower serves no reads. Negative keeps all.
	CacheKeep int64
	// MaxWait is the long-poll the follower asks for (default 500ms).
	MaxWait time.Duration
	// RequestTimeout bounds a request beyond MaxWait (default 10s).
	RequestTimeout time.Duration
	// MaxResponseBytes bounds a response body the follower accepts
	// (default 64 MiB; it must exceed the largest batch).
	MaxResponseBytes int64
	// MinBackoff and MaxBackoff bound the exponential retry delay
	// (defaults 50ms and 2s).
	MinBackoff, MaxBackoff time.Duration
	// Logger; nil selects slog.Default().
	Logger *slog.Logger
	// Pause, if set, is asked before every fetch: while it names a
	// reason (a full disk) the follower fetches no records, only
	// positions, every PausePoll; its position stands still, so the
	// leader takes it out of the ISR after its lag time rather than
	// waiting on appends that cannot succeed.
	Pause func() string
	// PausePoll is how often a paused follower fetches positions
	// (default 1 s).
	PausePoll time.Duration
	// Fatal, if set, is called when an fsync fails (the broker stops, as
	// a leader does: retrying an fsync can report success for data the
	// kernel dropped). Unset, the partition is left out of fetches.
	Fatal func(error)
}

func (c *FollowerConfig) defaults() {
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8 << 20
	}
	if c.CacheKeep == 0 {
		c.CacheKeep = 1 << 20
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	c.MaxWait = min(c.MaxWait, MaxWait*time.Millisecond)
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = 64 << 20
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 50 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(2*time.Second, c.MinBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PausePoll <= 0 {
		c.PausePoll = time.Second
	}
	if c.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.ResponseHeaderTimeout = c.MaxWait + c.RequestTimeout
		tr.MaxIdleConnsPerHost = 4
		if c.TLS != nil {
			tr.TLSClientConfig = c.TLS.Clone()
		}
		c.Client = &http.Client{Transport: tr}
	}
}

// Status is a Follower's view, for /replication/status and tests.
type Status struct {
	// State is the fetcher's state (idle, manifest, truncation, fetching).
	State string `json:"state"`
	// LeaderID, Leader and Epoch identify the leader followed.
	LeaderID int32  `json:"leaderId"`
	Leader   string `json:"leader"`
	Epoch    int32  `json:"epoch"`
	// LastError is the latest failure ("" after a success).
	LastError string `json:"lastError,omitempty"`
	// Unauthorized is set while the leader rejects the token (401).
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Fenced is set when the leader answered FENCED_LEADER_EPOCH: the
	// follower waits for SetLeader. (NOT_LEADER is retried: the replica
	// the group names may not have promoted itself yet.)
	Fenced bool `json:"fenced,omitempty"`
	// Fetches counts successful fetches.
	Fetches int64 `json:"fetches"`
	// CorruptBatches counts fetched batches rejected by validation.
	CorruptBatches int64 `json:"corruptBatches"`
	// Unsyncable lists the partitions ("topic-partition") left out of
	// the latest fetch because their log could not be fsynced: their
	// disk failed, and the broker must take them out of service.
	Unsyncable []string `json:"unsyncable,omitempty"`
	// Resets counts partitions discarded and restarted at the leader's
	// log start.
	Resets int64 `json:"resets"`
	// Paused names why the follower fetches positions only ("" while it
	// fetches records).
	Paused string `json:"paused,omitempty"`
}

type leaderTarget struct {
	id    int32
	addr  string
	epoch int32
	lost  bool
}

// Follower copies a leader's logs. It runs the replication.Fetcher loop in
// a goroutine it owns, between Start and Stop; SetLeader and ClearLeader
// steer it. Its methods are safe for concurrent use.
type Follower struct {
	cfg  FollowerConfig
	sink Sink
	log  *slog.Logger

	mu        sync.Mutex
	pending   *leaderTarget      // set by SetLeader/ClearLeader, taken by the loop
	cancelReq context.CancelFunc // cancels the in-flight step
	status    Status
	cancelRun context.CancelFunc
	done      chan struct{}
	wake      chan struct{}

	// Owned by the loop goroutine.
	fetcher *replication.Fetcher
	addr    string
	parts   []replication.TopicPartition
	rot     int
	backoff time.Duration
	digest  string // of the latest manifest or fetch answer
	// fetchBuf is reused for every fetch answer (callInto).
	fetchBuf []byte
	// jsonFetch: the leader refused a binary fetch request (a build
	// before that framing), so fetches are sent as JSON until the leader
	// changes.
	jsonFetch bool
}

// NewFollower returns a stopped follower that applies what it copies to
// sink.
func NewFollower(cfg FollowerConfig, sink Sink) *Follower {
	cfg.defaults()
	f := &Follower{cfg: cfg, sink: sink, log: cfg.Logger, wake: make(chan struct{}, 1), fetcher: replication.NewFetcher()}
	f.status = Status{State: replication.StateIdle.String(), LeaderID: -1, Epoch: -1}
	return f
}

// Start launches the replication goroutine; it runs until Stop or until
// ctx ends.
func (f *Follower) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done != nil {
		return errors.New("shipping: follower already started")
	}
	ctx, f.cancelRun = context.WithCancel(ctx)
	f.done = make(chan struct{})
	go f.run(ctx, f.done)
	return nil
}

// Stop ends the replication goroutine, cancelling any request in flight,
// and waits for it. The follower cannot be restarted.
func (f *Follower) Stop() {
	f.mu.Lock()
	cancel, done := f.cancelRun, f.done
	f.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// SetLeader starts following the leader id at addr ("host:port", dialled
// with https when FollowerConfig.TLS is set, else http; or a base URL) in
// epoch. A request in flight to the previous leader is abandoned. An epoch
// older than the one followed is ignored.
func (f *Follower) SetLeader(id int32, addr string, epoch int32) {
	if !strings.Contains(addr, "://") {
		scheme := "http://"
		if f.cfg.TLS != nil {
			scheme = "https://"
		}
		addr = scheme + addr
	}
	f.steer(&leaderTarget{id: id, addr: strings.TrimRight(addr, "/"), epoch: epoch})
}

// ClearLeader stops fetching until the next SetLeader (this replica became
// the leader, or the group has none).
func (f *Follower) ClearLeader() {
	f.steer(&leaderTarget{lost: true})
}

func (f *Follower) steer(t *leaderTarget) {
	f.mu.Lock()
	f.pending = t
	if f.cancelReq != nil {
		f.cancelReq()
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Status returns the follower's current view.
func (f *Follower) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	st.Unsyncable = slices.Clone(st.Unsyncable)
	return st
}

func (f *Follower) setStatus(fn func(*Status)) {
	f.mu.Lock()
	fn(&f.status)
	f.mu.Unlock()
}

// stepContext returns the context of one step, cancelled by Stop or by a
// leader change.
func (f *Follower) stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending != nil {
		c, cancel := context.WithCancel(ctx)
		cancel()
		return c, cancel
	}
	c, cancel := context.WithCancel(ctx)
	f.cancelReq = cancel
	return c, cancel
}

// takePending applies a pending leader change to the fetcher.
func (f *Follower) takePending(act replication.Action) replication.Action {
	f.mu.Lock()
	t := f.pending
	f.pending = nil
	f.mu.Unlock()
	if t == nil {
		return act
	}
	if t.lost {
		act = f.fetcher.LeaderLost()
	} else {
		act = f.fetcher.NewLeader(t.id, t.epoch)
		if id, epoch := f.fetcher.Leader(); id == t.id && epoch == t.epoch {
			f.addr = t.addr
			f.jsonFetch = false
		}
		f.backoff = 0
	}
	id, epoch := f.fetcher.Leader()
	f.setStatus(func(s *Status) {
		s.LeaderID, s.Epoch, s.Leader = id, epoch, f.addr
		if !t.lost {
			s.Fenced = false
		}
	})
	return act
}

func (f *Follower) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	act := replication.Action{Kind: replication.ActWait}
	for ctx.Err() == nil {
		act = f.takePending(act)
		f.setStatus(func(s *Status) { s.State = f.fetcher.State().String() })
		if act.Backoff {
			f.backoff = min(max(2*f.backoff, f.cfg.MinBackoff), f.cfg.MaxBackoff)
			if !f.sleep(ctx, f.backoff) {
				continue // woken by a leader change or Stop
			}
		}
		switch act.Kind {
		case replication.ActWait:
			select {
			case <-ctx.Done():
			case <-f.wake:
			}
			continue
		}
		sctx, cancel := f.stepContext(ctx)
		act = f.step(sctx, act)
		cancel()
	}
}

// sleep waits d; false when woken early by a leader change or Stop.
func (f *Follower) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-f.wake:
		// Let takePending see the change; keep the wake-up meaning.
	}
	return false
}

// step performs one action and returns the fetcher's next decision.
func (f *Follower) step(ctx context.Context, act replication.Action) replication.Action {
	switch act.Kind {
	case replication.ActFetchManifest:
		digest, err := f.syncManifest(ctx, act.Epoch)
		if err != nil {
			return f.failed(ctx, act.Epoch, "manifest", err)
		}
		f.succeeded()
		return f.fetcher.ManifestApplied(act.Epoch, digest)
	case replication.ActTruncate:
		if err := f.truncateAll(ctx, act.Epoch); err != nil {
			return f.failed(ctx, act.Epoch, "truncation", err)
		}
		f.succeeded()
		return f.fetcher.TruncationDone(act.Epoch)
	case replication.ActResetPartition:
		if err := f.reset(act.Partition, act.Offset); err != nil {
			return f.failed(ctx, act.Epoch, "reset", err)
		}
		return f.fetcher.FetchResult(act.Epoch, f.digest)
	case replication.ActFetch:
		paused := f.paused()
		next, err := f.fetchOnce(ctx, act.Epoch, paused)
		if err != nil {
			return f.failed(ctx, act.Epoch, "fetch", err)
		}
		f.succeeded()
		if paused {
			f.sleep(ctx, f.cfg.PausePoll)
		}
		return next
	}
	return act
}

// paused reports whether the follower must not fetch records now (Pause),
// logging when a pause begins and ends. A paused follower still fetches
// positions, every PausePoll: it learns the leader's high watermark and
// log start, whose retention frees its disk.
func (f *Follower) paused() bool {
	why := ""
	if f.cfg.Pause != nil {
		why = f.cfg.Pause()
	}
	var was string
	f.setStatus(func(s *Status) { was, s.Paused = s.Paused, why })
	switch {
	case why != "" && was == "":
		f.log.Warn("replication: fetching no records from the leader, only positions; it takes this replica out of the in-sync set after its lag time", "reason", why, "leader", f.addr)
	case why == "" && was != "":
		f.log.Info("replication: fetching records from the leader again", "was_paused_for", was, "leader", f.addr)
	}
	return why != ""
}

func (f *Follower) succeeded() {
	f.backoff = 0
	f.setStatus(func(s *Status) { s.LastError, s.Unauthorized = "", false })
}

// failed maps err to the fetcher's error kinds.
func (f *Follower) failed(ctx context.Context, epoch int32, what string, err error) replication.Action {
	if ctx.Err() != nil {
		// Abandoned by Stop or a leader change: not the leader's fault.
		return f.fetcher.Failed(epoch, replication.ErrTransient)
	}
	kind := replication.ErrTransient
	var he *httpError
	if errors.As(err, &he) {
		switch he.name {
		case ErrNameFenced:
			kind = replication.ErrFencedLeaderEpoch
		case ErrNameNotLeader:
			kind = replication.ErrNotLeader
		case ErrNameUnknownEpoch:
			kind = replication.ErrUnknownLeaderEpoch
		}
	}
	f.log.Warn("replication: "+what+" failed", "leader", f.addr, "epoch", epoch, "err", err)
	f.setStatus(func(s *Status) {
		s.LastError = what + ": " + err.Error()
		s.Unauthorized = he != nil && he.status == http.StatusUnauthorized
		s.Fenced = kind == replication.ErrFencedLeaderEpoch
	})
	return f.fetcher.Failed(epoch, kind)
}

// httpError is a non-200 answer from the leader.
type httpError struct {
	status int
	name   string
	epoch  int32
}

func (e *httpError) Error() string {
	return fmt.Sprintf("leader answered %d %s (leader epoch %d)", e.status, e.name, e.epoch)
}

// errCorrupt reports batches rejected by validation; the fetch is retried.
var errCorrupt = errors.New("shipping: corrupt batch from leader")

// call sends one request and returns the (bounded) body of a 200 answer.
func (f *Follower) call(ctx context.Context, epoch int32, method, path string, req any) ([]byte, error) {
	return f.callInto(ctx, epoch, method, path, req, nil)
}

// callInto is call reading the answer into *buf's memory when it is large
// enough (and keeping a larger buffer there for next time); the result
// aliases *buf then. nil allocates.
func (f *Follower) callInto(ctx context.Context, epoch int32, method, path string, req any, buf *[]byte) ([]byte, error) {
	var body io.Reader
	contentType := "application/json"
	if br, ok := req.(*FetchRequest); ok && !f.jsonFetch {
		body, contentType = bytes.NewReader(br.appendBinary(nil)), ContentTypeBinary
	} else if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.MaxWait+f.cfg.RequestTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, method, f.addr+path, body)
	if err != nil {
		return nil, err
	}
	if req != nil {
		hr.Header.Set("Content-Type", contentType)
	}
	if f.cfg.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	hr.Header.Set(HeaderLeaderEpoch, strconv.FormatInt(int64(epoch), 10))
	resp, err := f.cfg.Client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := readBody(resp, f.cfg.MaxResponseBytes, buf)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > f.cfg.MaxResponseBytes {
		return nil, fmt.Errorf("shipping: response larger than %d bytes", f.cfg.MaxResponseBytes)
	}
	if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte("HTTP request to an HTTPS server")) {
		// Go's HTTPS server answers plain HTTP so: a configuration
		// mismatch, not a transient failure of the leader.
		return nil, errors.New("the leader's replication port serves TLS, this replica sent plain HTTP (it has no Replication.TLS)")
	}
	if resp.StatusCode != http.StatusOK {
		he := &httpError{status: resp.StatusCode, name: http.StatusText(resp.StatusCode), epoch: -1}
		var eb errorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			he.name, he.epoch = eb.Error, eb.Epoch
		}
		return nil, he
	}
	return b, nil
}

// syncManifest reads the leader's manifest and makes the local topics
// match it; it returns the manifest's digest.
func (f *Follower) syncManifest(ctx context.Context, epoch int32) (string, error) {
	b, err := f.call(ctx, epoch, http.MethodGet, PathManifest, nil)
	if err != nil {
		return "", err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("shipping: bad manifest: %w", err)
	}
	if m.Epoch != epoch {
		return "", &httpError{status: http.StatusConflict, name: ErrNameUnknownEpoch, epoch: m.Epoch}
	}
	if err := f.applyManifest(m.Topics); err != nil {
		return "", err
	}
	f.digest = m.Digest
	return m.Digest, nil
}

func (f *Follower) applyManifest(topics []TopicInfo) error {
	remote := make(map[string]TopicInfo, len(topics))
	for _, t := range topics {
		if t.Name == "" || t.Partitions < 0 {
			return fmt.Errorf("shipping: bad topic %q in manifest", t.Name)
		}
		remote[t.Name] = t
	}
	local := make(map[string]TopicInfo)
	for _, t := range f.sink.Topics() {
		local[t.Name] = t
	}
	for _, name := range slices.Sorted(maps.Keys(local)) {
		if r, ok := remote[name]; !ok || r.ID != local[name].ID {
			f.log.Info("replication: dropping topic", "topic", name, "id", local[name].ID)
			if err := f.sink.DeleteTopic(name); err != nil {
				return fmt.Errorf("delete topic %s: %w", name, err)
			}
			delete(local, name)
		}
	}
	parts := f.parts[:0]
	for _, name := range slices.Sorted(maps.Keys(remote)) {
		r := remote[name]
		l, ok := local[name]
		switch {
		case !ok:
			f.log.Info("replication: creating topic", "topic", name, "id", r.ID, "partitions", r.Partitions)
			if err := f.sink.CreateTopic(r); err != nil {
				return fmt.Errorf("create topic %s: %w", name, err)
			}
		default:
			if r.Partitions > l.Partitions {
				if err := f.sink.CreatePartitions(name, r.Partitions); err != nil {
					return fmt.Errorf("create partitions %s: %w", name, err)
				}
			}
			if !maps.Equal(normConfigs(r.Configs), normConfigs(l.Configs)) {
				if err := f.sink.SetConfigs(name, r.Configs); err != nil {
					return fmt.Errorf("configure %s: %w", name, err)
				}
			}
			if r.MetaIndex != l.MetaIndex {
				if err := f.sink.SetMetaIndex(name, r.MetaIndex); err != nil {
					return fmt.Errorf("metadata index of %s: %w", name, err)
				}
			}
		}
		for p := range r.Partitions {
			parts = append(parts, replication.TopicPartition{Topic: name, Partition: p})
		}
	}
	f.parts = parts
	return nil
}

func normConfigs(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func followerLog(l ReplicaLog) replication.FollowerLog {
	h := l.EpochHistory()
	fl := replication.FollowerLog{LogStart: l.StartOffset(), LogEnd: l.EndOffset(), History: make([]replication.EpochEntry, len(h))}
	for i, e := range h {
		fl.History[i] = replication.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return fl
}

// maxTruncationRounds bounds the KIP-279 loop; epochs strictly decrease,
// so it only trips on a misbehaving leader.
const maxTruncationRounds = 64

// truncateAll reconciles every partition with the leader of epoch
// (KIP-101/279), asking about all partitions of a round in one request.
func (f *Follower) truncateAll(ctx context.Context, epoch int32) error {
	type pending struct {
		tp  replication.TopicPartition
		log ReplicaLog
		d   replication.TruncDecision
	}
	var asks []pending
	for _, tp := range f.parts {
		l, ok := f.sink.Partition(tp)
		if !ok {
			return fmt.Errorf("shipping: local partition %s-%d missing", tp.Topic, tp.Partition)
		}
		asks = append(asks, pending{tp, l, replication.StartTruncation(followerLog(l))})
	}
	for round := 0; ; round++ {
		var next []pending
		var req EpochEndRequest
		for _, a := range asks {
			if a.d.Action != replication.TruncAsk {
				if err := f.finishTruncation(a.tp, a.log, a.d); err != nil {
					return err
				}
				continue
			}
			if a.d.Truncate && a.d.Offset < a.log.EndOffset() {
				if err := a.log.Truncate(a.d.Offset); err != nil {
					return fmt.Errorf("truncate %s-%d: %w", a.tp.Topic, a.tp.Partition, err)
				}
			}
			next = append(next, a)
			req.Partitions = append(req.Partitions, EpochEndQuery{Topic: a.tp.Topic, Partition: a.tp.Partition, Epoch: a.d.Epoch})
		}
		if len(next) == 0 {
			return nil
		}
		if round >= maxTruncationRounds {
			return errors.New("shipping: truncation does not converge")
		}
		var resp EpochEndResponse
		for off := 0; off < len(req.Partitions); {
			n := requestWindow(len(req.Partitions)-off, func(i int) string { return req.Partitions[off+i].Topic })
			chunk := EpochEndRequest{Partitions: req.Partitions[off : off+n]}
			off += n
			b, err := f.call(ctx, epoch, http.MethodPost, PathEpochEnd, chunk)
			if err != nil {
				return err
			}
			var part EpochEndResponse
			if err := json.Unmarshal(b, &part); err != nil {
				return fmt.Errorf("shipping: bad epoch-end answer: %w", err)
			}
			if len(part.Partitions) != len(chunk.Partitions) {
				return errors.New("shipping: epoch-end answer does not match the request")
			}
			resp.Partitions = append(resp.Partitions, part.Partitions...)
		}
		asks = asks[:0]
		for i, a := range next {
			ans := resp.Partitions[i]
			if ans.Topic != a.tp.Topic || ans.Partition != a.tp.Partition {
				return errors.New("shipping: epoch-end answer does not match the request")
			}
			if ans.Error != "" {
				// The leader no longer has it: the digest has changed
				// and the next manifest drops it.
				continue
			}
			a.d = replication.DecideTruncation(followerLog(a.log),
				a.d.Epoch, replication.LeaderEpochAnswer{Epoch: ans.Epoch, EndOffset: ans.EndOffset, LogStart: ans.LogStart})
			asks = append(asks, a)
		}
	}
}

// requestWindow returns how many of the next n partitions fit in one
// request: at most MaxRequestPartitions, and an estimated JSON size within
// 7/8 of MaxRequestBytes. topic(i) names the i-th. At least one.
func requestWindow(n int, topic func(i int) string) int {
	size := 0
	for i := range min(n, MaxRequestPartitions) {
		size += len(topic(i)) + 64
		if size > MaxRequestBytes/8*7 {
			return max(i, 1)
		}
	}
	return min(n, MaxRequestPartitions)
}

func (f *Follower) finishTruncation(tp replication.TopicPartition, l ReplicaLog, d replication.TruncDecision) error {
	switch d.Action {
	case replication.TruncDone:
		if d.Offset < l.EndOffset() {
			f.log.Info("replication: truncating divergent tail", "topic", tp.Topic, "partition", tp.Partition, "from", l.EndOffset(), "to", d.Offset)
			if err := l.Truncate(d.Offset); err != nil {
				return fmt.Errorf("truncate %s-%d: %w", tp.Topic, tp.Partition, err)
			}
		}
	case replication.TruncReset:
		return f.reset(tp, d.Offset)
	}
	return nil
}

func (f *Follower) reset(tp replication.TopicPartition, offset int64) error {
	l, ok := f.sink.Partition(tp)
	if !ok {
		return fmt.Errorf("shipping: local partition %s-%d missing", tp.Topic, tp.Partition)
	}
	f.log.Info("replication: resetting partition to the leader's log start", "topic", tp.Topic, "partition", tp.Partition, "offset", offset)
	if err := l.TruncateFullyAndStartAt(offset); err != nil {
		return fmt.Errorf("reset %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	f.setStatus(func(s *Status) { s.Resets++ })
	return nil
}

// fetchOnce sends one fetch carrying every partition's durable end,
// appends and fsyncs what comes back, and returns the fetcher's decision.
func (f *Follower) fetchOnce(ctx context.Context, epoch int32, positionsOnly bool) (replication.Action, error) {
	req := FetchRequest{Replica: f.cfg.ReplicaID, MaxBytes: f.cfg.MaxBytes, MaxWaitMs: int32(f.cfg.MaxWait / time.Millisecond), PositionsOnly: positionsOnly}
	logs := make(map[replication.TopicPartition]ReplicaLog, len(f.parts))
	n := len(f.parts)
	var unsyncable []string
	window := requestWindow(n, func(i int) string { return f.parts[(f.rot+i)%n].Topic })
	for i := range window {
		// Rotate the order so that no partition starves the others of
		// the response budget.
		tp := f.parts[(f.rot+i)%n]
		l, ok := f.sink.Partition(tp)
		if !ok {
			continue
		}
		end, ok := f.durableEnd(tp, l)
		if !ok {
			unsyncable = append(unsyncable, tp.Topic+"-"+strconv.Itoa(int(tp.Partition)))
			continue
		}
		logs[tp] = l
		req.Partitions = append(req.Partitions, FetchPosition{Topic: tp.Topic, Partition: tp.Partition, Offset: end})
	}
	if n > 0 {
		// Rotate the starting partition: by one when every partition
		// fits in a request, so no partition starves the others of the
		// response budget; by a window otherwise, so every partition is
		// reported in turn.
		step := 1
		if window < n {
			step = window
		}
		f.rot = (f.rot + step) % n
	}
	f.setStatus(func(s *Status) { s.Unsyncable = unsyncable })
	// The answer's records are appended (copied to the log) before the
	// next fetch, so one buffer serves every fetch of this goroutine.
	b, err := f.callInto(ctx, epoch, http.MethodPost, PathFetch, &req, &f.fetchBuf)
	if he := (*httpError)(nil); errors.As(err, &he) && he.status == http.StatusBadRequest && !f.jsonFetch {
		// Any leader takes JSON; one that refuses the binary framing is
		// of an older build (or mis-parsed it): the retry is JSON.
		f.jsonFetch = true
		f.log.Warn("replication: the leader refused a binary fetch request; fetching with JSON requests from it", "leader", f.addr, "err", err)
	}
	if err != nil {
		return replication.Action{}, err
	}
	resp, err := decodeFetchResponse(b)
	if err != nil {
		return replication.Action{}, err
	}
	asked := make(map[replication.TopicPartition]int64, len(req.Partitions))
	for _, p := range req.Partitions {
		asked[replication.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p.Offset
	}
	var corrupt, failed error
	var synced []syncItem
	act := replication.Action{Kind: replication.ActFetch, Epoch: epoch}
	f.startEpochs(resp.parts, asked, logs, epoch)
	for _, p := range resp.parts {
		tp := replication.TopicPartition{Topic: p.topic, Partition: p.partition}
		offset, ok := asked[tp]
		if !ok {
			continue // not asked: ignore
		}
		l := logs[tp]
		switch p.code {
		case codeNone:
			f.sink.LeaderPosition(tp, p.hw, p.logStart)
			if len(p.records) == 0 {
				continue
			}
			appended, err := f.appendAll(tp, l, offset, epoch, p)
			if appended {
				synced = append(synced, syncItem{tp, l})
			}
			if err != nil {
				if errors.Is(err, errCorrupt) {
					corrupt = err
				} else {
					failed = err
				}
			}
		case codeOffsetOutOfRange:
			a := f.fetcher.OffsetOutOfRange(epoch, tp, offset, p.logStart, p.logEnd)
			if a.Kind == replication.ActResetPartition {
				if err := f.reset(a.Partition, a.Offset); err != nil {
					failed = err
				}
			}
		case codeUnknownTopic:
			// The leader dropped it; the digest tells the fetcher to
			// reread the manifest.
		default:
			failed = fmt.Errorf("shipping: leader failed to read %s-%d (code %d)", tp.Topic, tp.Partition, p.code)
		}
	}
	if err := f.syncAll(synced); err != nil {
		if f.cfg.Fatal != nil {
			f.cfg.Fatal(err)
		}
		if failed == nil {
			failed = err
		}
	}
	f.digest = resp.digest
	f.setStatus(func(s *Status) { s.Fetches++ })
	switch {
	case corrupt != nil:
		return act, corrupt
	case failed != nil:
		return act, failed
	}
	return f.fetcher.FetchResult(epoch, resp.digest), nil
}

// startEpochs persists, for the partitions of an answer whose first batch
// starts a newer leader epoch at the log's end, that epoch's start,
// several at once: each is a line appended to the partition's history and
// synced, and the first answer after a failover starts the new epoch on
// every partition. Only an epoch appendAll would take is started (a whole
// batch whose checksum holds, below the leader's log end, its epoch within
// the bounds appendAll checks, since the checksum does not cover it): a
// history must not claim an epoch starts where appendAll then refuses
// every batch. An answer that starts one partition's epoch leaves it to
// appendAll.
func (f *Follower) startEpochs(parts []fetchPart, asked map[replication.TopicPartition]int64, logs map[replication.TopicPartition]ReplicaLog, epoch int32) {
	var starts []EpochStart
	for _, p := range parts {
		tp := replication.TopicPartition{Topic: p.topic, Partition: p.partition}
		offset, ok := asked[tp]
		if !ok || p.code != codeNone || len(p.records) < recordbatch.HeaderSize {
			continue
		}
		l := logs[tp]
		h, err := recordbatch.ParseHeader(p.records)
		if err != nil || h.BaseOffset != offset || l.EndOffset() != offset || h.Size() > len(p.records) ||
			h.LastOffsetDelta < 0 || h.LastOffset() >= p.logEnd {
			continue
		}
		if _, err := recordbatch.Check(p.records[:h.Size()]); err != nil {
			continue // appendAll refuses it
		}
		if e := h.PartitionLeaderEpoch; e > l.LatestEpoch() && e <= f.sink.EpochCeiling(tp, epoch) {
			starts = append(starts, EpochStart{l, e, offset})
		}
	}
	if len(starts) < 2 {
		return
	}
	// A failure is appendAll's to report: it tries again.
	if es, ok := f.sink.(EpochStarter); ok {
		es.StartEpochs(starts)
		return
	}
	parallel.Each(starts, maxParallelSyncs, func(s EpochStart) {
		_ = s.Log.StartEpoch(s.Epoch, s.At)
	})
}

// durableEnd fsyncs l if needed and returns the offset to report: its
// durable end, which must also be its log end (the next batch is appended
// there). A log whose sync fails is left out of the fetch.
func (f *Follower) durableEnd(tp replication.TopicPartition, l ReplicaLog) (int64, bool) {
	if l.DurableEnd() != l.EndOffset() {
		if _, err := l.Sync(); err != nil {
			if f.cfg.Fatal != nil {
				f.cfg.Fatal(fmt.Errorf("fsync %s-%d: %w", tp.Topic, tp.Partition, err))
			}
			f.log.Error("replication: fsync failed; partition not fetched", "topic", tp.Topic, "partition", tp.Partition, "err", err)
			return 0, false
		}
	}
	end := l.DurableEnd()
	if end != l.EndOffset() {
		return 0, false
	}
	return end, true
}

// syncItem is a partition log that an answer appended to.
type syncItem struct {
	tp replication.TopicPartition
	l  ReplicaLog
}

// syncAll fsyncs the logs an answer appended to, all at once (one after
// the other, eight partitions cost eight fsync latencies before the next
// fetch could report any of them): with one SyncLogs call when the sink
// can, else in parallel. Then it drops their durable bytes from the page
// cache. It returns the errors joined.
func (f *Follower) syncAll(items []syncItem) error {
	errs := make([]error, len(items))
	synced := func(i int, err error) {
		if err != nil {
			errs[i] = fmt.Errorf("fsync %s-%d: %w", items[i].tp.Topic, items[i].tp.Partition, err)
			return
		}
		if f.cfg.CacheKeep >= 0 {
			items[i].l.DropCache(f.cfg.CacheKeep)
		}
	}
	syncOne := func(i int) {
		_, err := items[i].l.Sync()
		synced(i, err)
	}
	if ls, ok := f.sink.(LogSyncer); ok && len(items) > 1 {
		logs := make([]ReplicaLog, len(items))
		for i, it := range items {
			logs[i] = it.l
		}
		for i, err := range ls.SyncLogs(logs) {
			synced(i, err)
		}
		return errors.Join(errs...)
	}
	if len(items) == 1 {
		syncOne(0)
	} else {
		// At most maxParallelSyncs at once: an answer may touch
		// thousands of partitions.
		idx := make([]int, len(items))
		for i := range idx {
			idx[i] = i
		}
		parallel.Each(idx, maxParallelSyncs, syncOne)
	}
	return errors.Join(errs...)
}

// maxParallelSyncs bounds the fsyncs syncAll runs at once (as the
// leader's flusher does).
const maxParallelSyncs = 16

// appendAll validates and appends p's batches to l (whose end is offset)
// and reports whether it appended any; the caller fsyncs. A batch that
// fails validation is not appended, nor is anything after it.
func (f *Follower) appendAll(tp replication.TopicPartition, l ReplicaLog, offset int64, epoch int32, p fetchPart) (bool, error) {
	recs := p.records
	next := offset
	latest := l.LatestEpoch()
	ceiling := f.sink.EpochCeiling(tp, epoch)
	gapsAllowed := false
	var err error
	for len(recs) > 0 {
		var h recordbatch.Header
		h, err = recordbatch.ParseHeader(recs)
		if err == nil && h.Size() > len(recs) {
			err = errors.New("batch overruns the response")
		}
		if err == nil {
			h, err = recordbatch.Check(recs[:h.Size()])
		}
		// baseOffset and partitionLeaderEpoch are outside the CRC: bound
		// them.
		if err == nil && h.BaseOffset < next && next <= h.LastOffset() && l.StartOffset() == next && l.EndOffset() == next {
			// An empty log restarted at the leader's log start, which
			// falls inside this batch: restart it at the batch's base
			// (as Kafka does on UnexpectedAppendOffsetException), so
			// that the batch is stored whole.
			if err = l.TruncateFullyAndStartAt(h.BaseOffset); err != nil {
				return false, fmt.Errorf("restart %s-%d at %d: %w", tp.Topic, tp.Partition, h.BaseOffset, err)
			}
			offset, next = h.BaseOffset, h.BaseOffset
		}
		switch {
		case err != nil:
		case h.BaseOffset < next:
			err = fmt.Errorf("batch at offset %d, expected %d", h.BaseOffset, next)
		case h.LastOffsetDelta < 0 || h.LastOffset() >= p.logEnd:
			err = fmt.Errorf("batch [%d, %d] beyond the leader's log end %d", h.BaseOffset, h.LastOffset(), p.logEnd)
		case h.PartitionLeaderEpoch > ceiling || h.PartitionLeaderEpoch < latest:
			err = fmt.Errorf("batch epoch %d outside [%d, %d]", h.PartitionLeaderEpoch, latest, ceiling)
		case h.BaseOffset > next:
			err = gapOutOfLine(h, recs[h.Size():])
		}
		if err != nil {
			f.setStatus(func(s *Status) { s.CorruptBatches++ })
			err = fmt.Errorf("%w: %s-%d at %d: %v", errCorrupt, tp.Topic, tp.Partition, next, err)
			break
		}
		if h.BaseOffset > next && !gapsAllowed {
			// The leader's compaction removed whole batches here (Kafka's
			// followers copy such gaps too). Every batch of this response
			// lies below the leader's log end, so one durable note covers
			// all of its gaps.
			if aerr := l.AllowGaps(p.logEnd); aerr != nil {
				err = fmt.Errorf("allow offset gaps in %s-%d below %d: %w", tp.Topic, tp.Partition, p.logEnd, aerr)
				break
			}
			gapsAllowed = true
		}
		batch := recs[:h.Size()]
		if aerr := l.AppendReplica(batch); aerr != nil {
			err = fmt.Errorf("append %s-%d at %d: %w", tp.Topic, tp.Partition, next, aerr)
			break
		}
		latest = max(latest, h.PartitionLeaderEpoch)
		next = h.LastOffset() + 1
		recs = recs[h.Size():]
	}
	return next > offset, err
}

// gapOutOfLine checks a batch h that follows an offset gap against the
// batch after it, rest's first: no CRC covers a base offset, and a raised
// bit in one looks like a gap, but then the next batch starts inside it.
func gapOutOfLine(h recordbatch.Header, rest []byte) error {
	nh, err := recordbatch.ParseHeader(rest)
	if err == nil && nh.BaseOffset <= h.LastOffset() {
		return fmt.Errorf("batch at offset %d after a gap, out of line with the batch at %d after it", h.BaseOffset, nh.BaseOffset)
	}
	return nil
}

// readBody reads at most limit+1 bytes of resp's body. With a
// Content-Length it reads into one buffer of that size (*buf's when it is
// large enough): io.ReadAll grows its buffer by doubling, copying and
// zeroing megabytes per fetch answer (about 30% of a follower's CPU in
// profiles, docs/BENCHMARKS.md).
func readBody(resp *http.Response, limit int64, buf *[]byte) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > limit {
		return io.ReadAll(io.LimitReader(resp.Body, limit+1))
	}
	var b []byte
	if buf != nil && int64(cap(*buf)) >= n {
		b = (*buf)[:n]
	} else {
		b = make([]byte, n)
		if buf != nil {
			*buf = b
		}
	}
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return nil, err
	}
	return b, nil
}
