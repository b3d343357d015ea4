package stoatflow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/crashpoint"
	"github.com/moonmq/moonmq/stoatflow/internal/ha"
)

var (
	errDemoted = errors.New("another pod holds the promotion token")
	errHandoff = errors.New("handing off")
)

// haRuntime carries out ha.Node's decisions for one pod: it reads and
// writes the coordination topic on a goroutine of its own (owned by
// runHA, stopped by stop), and tells the processing side what to do
// through actions.
type haRuntime struct {
	a    *App
	cfg  ha.Config
	prod *kgo.Client // coordination records, not transactional
	cons *kgo.Client

	mu          sync.Mutex // guards node and what follows
	node        *ha.Node
	gen         int64
	lastCurrent time.Time // when this pod last read the topic to its end
	claimAt     time.Time
	promotedAt  time.Time
	epoch       int64 // the epoch this pod promoted to
	handoffTo   string
	handoffF    bool

	actions chan ha.Action
	cancel  context.CancelFunc
	done    chan struct{}
}

func newIncarnation() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runHA runs this pod as a standby until it wins the promotion token, then
// as the active until it is demoted, hands off, or stops; a demoted or
// fenced active becomes a standby again in place.
func (a *App) runHA(ctx context.Context) error {
	h, err := a.startHA(ctx)
	if err != nil {
		return err
	}
	defer h.stop()
	a.ha.Store(h)
	a.haCheck = h.check
	for {
		epoch, err := h.standby(ctx)
		if err != nil {
			if ctx.Err() != nil {
				h.leave()
				return nil
			}
			// A broker failing over refuses the changelog offsets for a
			// moment: a standby waits and tries again rather than exit.
			a.log.Warn("standby interrupted; starting it again", "err", err)
			time.Sleep(h.cfg.Heartbeat)
			continue
		}
		err = h.promote(ctx, epoch)
		if err != nil && !errors.Is(err, ErrFenced) && ctx.Err() == nil {
			// The broker may be failing over: stand down and let the
			// election run again rather than exit.
			a.log.Warn("promotion failed; standing down", "err", err)
			a.deactivate()
			h.demoted()
			time.Sleep(h.cfg.Heartbeat)
			continue
		}
		for err == nil {
			err = a.loop(ctx)
			if errors.Is(err, errHandoff) {
				// nil: nobody took over; go on processing.
				err = h.handoff(ctx)
			}
		}
		switch {
		case ctx.Err() != nil:
			// SIGTERM of the active (a rolling deploy): commit, release
			// the token so a standby takes over without waiting for
			// failure detection, and leave.
			if a.prod == nil {
				h.leave()
				return nil
			}
			return h.stopActive()
		}
		if errors.Is(err, errDemoted) || errors.Is(err, ErrFenced) {
			a.log.Info("demoted: rebuilding as a standby in place", "why", err)
			a.deactivate()
			h.demoted()
			continue
		}
		if err != nil {
			return err
		}
	}
}

func (a *App) startHA(ctx context.Context) (*haRuntime, error) {
	if err := a.prepareCoordinationTopic(ctx); err != nil {
		return nil, err
	}
	base, err := a.clientOpts()
	if err != nil {
		return nil, err
	}
	c := ha.Config{
		Pod: a.cfg.HA.PodID, Incarnation: newIncarnation(), Heartbeat: a.cfg.HA.Heartbeat,
		StalenessMisses: a.cfg.HA.StalenessMisses, AcceptableRecoveryLag: a.cfg.HA.AcceptableRecoveryLag,
		FailoverPriority: a.cfg.HA.FailoverPriority, PromotionGrace: a.cfg.HA.PromotionGrace,
	}
	h := &haRuntime{a: a, cfg: c, node: ha.New(c), actions: make(chan ha.Action, 64), done: make(chan struct{})}
	topic := a.cfg.HA.CoordinationTopic
	if h.prod, err = kgo.NewClient(append(append([]kgo.Opt{}, base...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))...); err != nil {
		return nil, err
	}
	if h.cons, err = kgo.NewClient(append(append([]kgo.Opt{}, base...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(max(a.cfg.HA.Heartbeat/4, 10*time.Millisecond)))...); err != nil {
		h.prod.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.coordinate(cctx)
	a.log.Info("high availability: active-standby", "pod", c.Pod, "coordination_topic", topic,
		"heartbeat", c.Heartbeat.String(), "failure_detection", c.Staleness().String())
	return h, nil
}

// prepareCoordinationTopic creates the coordination topic or checks it:
// exactly one partition (the claims' order is the election), compacted.
func (a *App) prepareCoordinationTopic(ctx context.Context) error {
	topic := a.cfg.HA.CoordinationTopic
	spec := fmt.Sprintf("create it with exactly 1 partition and cleanup.policy=compact, for example: kafka-topics.sh --create --topic %s --partitions 1 --config cleanup.policy=compact (the application's principal needs Describe, Read and Write on it)", topic)
	md, err := a.adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("coordination topic %s: %w", topic, err)
	}
	if d, ok := md[topic]; ok && d.Err == nil {
		if len(d.Partitions) != 1 {
			a.log.Error("the coordination topic must have exactly one partition", "topic", topic, "partitions", len(d.Partitions), "spec", spec)
			return fmt.Errorf("coordination topic %s has %d partitions; it must have exactly one (its single order decides the election): %s", topic, len(d.Partitions), spec)
		}
		a.partitions[topic] = 1
		return a.waitTopics(ctx, []string{topic})
	}
	compact := "compact"
	resp, err := a.adm.CreateTopic(ctx, 1, int16(a.cfg.ReplicationFactor), map[string]*string{"cleanup.policy": &compact}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		a.log.Error("the coordination topic is missing and cannot be created", "topic", topic, "err", err, "spec", spec)
		return fmt.Errorf("coordination topic %s is missing and cannot be created (%v): %s", topic, err, spec)
	}
	a.partitions[topic] = 1
	return a.waitTopics(ctx, []string{topic})
}

// coordinate reads the coordination topic, heartbeats and ticks the node
// until stopped.
func (h *haRuntime) coordinate(ctx context.Context) {
	defer close(h.done)
	nextBeat := time.Now()
	var next int64 // next offset to read
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		fs := h.cons.PollFetches(pctx)
		cancel()
		now := time.Now()
		h.mu.Lock()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				next = r.Offset + 1
				rec, err := ha.Decode(r.Key, r.Value, r.Offset)
				if err != nil {
					h.a.log.Warn("skipping a coordination record", "err", err)
					continue
				}
				if rec != nil {
					h.deliver(h.node.Observe(rec, now))
				}
			}
			if p.Err == nil && next >= p.HighWatermark {
				h.lastCurrent = now
			}
		})
		h.node.SetCaughtUp(now.Sub(h.lastCurrent) <= h.cfg.Staleness())
		h.deliver(h.node.Tick(now))
		beat := !now.Before(nextBeat)
		var hb *ha.Heartbeat
		if beat {
			h.gen++
			hb = h.node.Heartbeat(h.gen)
			nextBeat = now.Add(h.cfg.Heartbeat)
		}
		h.mu.Unlock()
		if hb != nil {
			h.publishAsync(hb)
		}
	}
}

// deliver carries out an action; h.mu is held.
func (h *haRuntime) deliver(a ha.Action) {
	if a.Claim != nil {
		h.claimAt = time.Now()
		h.a.log.Info("claiming the promotion token", "epoch", a.Claim.Epoch, "lag", a.Claim.Lag, "reason", a.Claim.Reason)
		k, v := ha.Encode(a.Claim)
		h.prod.Produce(context.Background(), &kgo.Record{Key: k, Value: v, Partition: 0}, func(_ *kgo.Record, err error) {
			if err != nil {
				h.a.log.Warn("claim not published", "err", err)
				h.mu.Lock()
				h.node.ClaimFailed()
				h.mu.Unlock()
			}
		})
	}
	if a.Promote || a.Demote || a.Handoff {
		select {
		case h.actions <- a:
		default:
			h.a.log.Error("high availability: action queue full; dropping", "action", fmt.Sprintf("%+v", a))
		}
	}
}

func (h *haRuntime) publishAsync(v any) {
	k, val := ha.Encode(v)
	h.prod.Produce(context.Background(), &kgo.Record{Key: k, Value: val, Partition: 0}, func(_ *kgo.Record, err error) {
		if err != nil {
			h.a.log.Warn("coordination record not published", "err", err)
		}
	})
}

func (h *haRuntime) publishSync(ctx context.Context, key, value []byte) (int64, error) {
	r := &kgo.Record{Key: key, Value: value, Partition: 0}
	if err := h.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		return -1, err
	}
	return r.Offset, nil
}

func (h *haRuntime) stop() {
	h.cancel()
	<-h.done
	h.prod.Flush(context.Background())
	h.prod.Close()
	h.cons.Close()
}

// leave publishes a last heartbeat that says this pod is stopping, so
// nobody counts on it as a spare.
func (h *haRuntime) leave() {
	h.mu.Lock()
	h.node.Stopping()
	h.gen++
	hb := h.node.Heartbeat(h.gen)
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k, v := ha.Encode(hb)
	h.publishSync(ctx, k, v)
}

// check is called by the processing loop: it returns errDemoted or
// errHandoff when the pod must stop processing.
func (h *haRuntime) check() error {
	for {
		select {
		case a := <-h.actions:
			if a.Demote {
				return errDemoted
			}
			if a.Handoff {
				h.handoffTo, h.handoffF = a.HandoffTo, a.Force
				return errHandoff
			}
		default:
			return nil
		}
	}
}

// standby keeps the local stores a step behind the active by applying
// the changelogs as they are committed, until this pod wins the token.
func (h *haRuntime) standby(ctx context.Context) (int64, error) {
	a := h.a
	a.ready.Store(false)
	a.metrics.haRole.Set(0)
	targets, assign, _, err := a.changelogTargets(ctx, true)
	if err != nil {
		return 0, err
	}
	var cl *kgo.Client
	if len(assign) > 0 {
		if cl, err = a.changelogConsumer(assign); err != nil {
			return 0, err
		}
		defer cl.Close()
	}
	ap := newApplier(a)
	defer ap.close()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case act := <-h.actions:
			if act.Promote {
				return act.PromoteEpoch, nil
			}
			continue
		default:
		}
		if cl == nil {
			h.setLag(0, 0)
			select {
			case <-ctx.Done():
			case act := <-h.actions:
				if act.Promote {
					return act.PromoteEpoch, nil
				}
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if _, err := ap.apply(fs, targets, false); err != nil {
			return 0, err
		}
		if d := crashpoint.ApplyDelay(); d > 0 {
			time.Sleep(d)
		}
		var lag int64
		var oldest time.Time
		for _, t := range targets {
			if behind := t.end - (t.last + 1); behind > 0 {
				lag += behind
				if !t.lastTs.IsZero() && (oldest.IsZero() || t.lastTs.Before(oldest)) {
					oldest = t.lastTs
				}
			}
		}
		var lagMs int64
		if lag > 0 && !oldest.IsZero() {
			lagMs = time.Since(oldest).Milliseconds()
		}
		h.setLag(lag, lagMs)
	}
}

func (h *haRuntime) setLag(records, ms int64) {
	h.mu.Lock()
	h.node.SetLag(records, ms)
	h.mu.Unlock()
	h.a.metrics.haLagRecords.Set(float64(records))
	h.a.metrics.haLagMs.Set(float64(ms))
}

// promote fences the old active, drains the changelogs to their end and
// starts processing.
func (h *haRuntime) promote(ctx context.Context, epoch int64) error {
	a := h.a
	start := time.Now()
	h.mu.Lock()
	elect := start.Sub(h.claimAt)
	h.mu.Unlock()
	a.log.Info("promoting", "epoch", epoch)
	a.firstCommit = func() {
		a.metrics.haPhase.WithLabelValues("first_commit").Observe(time.Since(start).Seconds())
		a.log.Info("first commit as the active", "epoch", epoch, "since_promotion", time.Since(start).String())
	}
	if err := a.activate(ctx); err != nil {
		if fenced(err) {
			return fmt.Errorf("%w (%v)", ErrFenced, err)
		}
		return err
	}
	a.metrics.haPhase.WithLabelValues("elect").Observe(elect.Seconds())
	a.metrics.haPhase.WithLabelValues("fence_drain").Observe(time.Since(start).Seconds())
	a.metrics.haFailovers.Inc()
	a.metrics.haRole.Set(1)
	h.mu.Lock()
	h.node.Promoted()
	h.epoch, h.promotedAt = epoch, time.Now()
	h.mu.Unlock()
	a.log.Info("active", "epoch", epoch, "took", time.Since(start).String())
	return nil
}

// handoff drains and commits, releases the token to an elected (or the
// named) standby, and waits to be demoted by its claim.
func (h *haRuntime) handoff(ctx context.Context) error {
	a := h.a
	if err := a.commit(ctx); err != nil {
		return err
	}
	if err := a.checkpoint(); err != nil {
		return err
	}
	h.mu.Lock()
	rel := h.node.HandedOff(h.handoffTo, h.handoffF)
	h.mu.Unlock()
	k, v := ha.Encode(rel)
	if _, err := h.publishSync(ctx, k, v); err != nil {
		return fmt.Errorf("publish the handoff: %w", err)
	}
	a.metrics.haHandoffs.Inc()
	a.log.Info("handed off; waiting for the successor's claim", "to", rel.To)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case act := <-h.actions:
			if act.Demote {
				return errDemoted
			}
		case <-time.After(10 * time.Second):
			// Nobody took over: keep the token and go on processing.
			a.log.Warn("no standby took over within 10s; staying active")
			h.mu.Lock()
			h.node.Promoted()
			h.mu.Unlock()
			return nil
		}
	}
}

// stopActive is SIGTERM of the active: commit, checkpoint, release.
func (h *haRuntime) stopActive() error {
	a := h.a
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.commit(cctx); err != nil {
		return fmt.Errorf("final commit: %w", err)
	}
	if err := a.checkpoint(); err != nil {
		return err
	}
	h.mu.Lock()
	rel := h.node.HandedOff("", false)
	h.node.Stopping()
	h.mu.Unlock()
	k, v := ha.Encode(rel)
	if _, err := h.publishSync(cctx, k, v); err != nil {
		a.log.Warn("could not publish the handoff; the standbys take over after failure detection", "err", err)
	}
	h.leave()
	a.deactivate()
	a.log.Info("stoatflow stopped cleanly; the token is released")
	return nil
}

func (h *haRuntime) demoted() {
	h.mu.Lock()
	h.node.Demoted()
	h.mu.Unlock()
	h.a.metrics.haRole.Set(0)
}

// command publishes an operator command; it answers the command's offset.
func (h *haRuntime) command(ctx context.Context, c *ha.Command) (int64, error) {
	v, _ := jsonMarshal(c)
	return h.publishSync(ctx, []byte(fmt.Sprintf("cmd/%d", time.Now().UnixNano())), v)
}
