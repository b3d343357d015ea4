package raftgroup

// Log shipping in the simulation: the leader's handler
// (shipping/leader.go) and the follower's loop (shipping/follower.go)
// around the real replication.Fetcher and truncation decisions, over the
// simulated network instead of HTTP. One request is in flight per
// follower, as with the real follower's one HTTP call at a time.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
)

// Leader side of log shipping (shipping/leader.go).

func (r *sysReplica) reply(req *sysMsg, resp *sysMsg) {
	resp.from, resp.to, resp.req = r.id, req.from, req.req
	r.w.send(resp)
}

// epochMatches is the KIP-320 check of the handler.
func (r *sysReplica) epochMatches(asked int32) replication.FetchError {
	switch {
	case r.ldr == nil:
		return replication.ErrNotLeader
	case asked < r.epoch:
		return replication.ErrFencedLeaderEpoch
	case asked > r.epoch:
		return replication.ErrUnknownLeaderEpoch
	}
	return 0
}

func (r *sysReplica) serveEpochEnd(m *sysMsg) {
	if e := r.epochMatches(m.epoch); e != 0 {
		r.reply(m, &sysMsg{kind: msgEpochEndResp, err: e, epoch: r.epoch})
		return
	}
	resp := &sysMsg{kind: msgEpochEndResp, epoch: r.epoch}
	for _, a := range m.asks {
		l := r.logs[a.part]
		ans := replication.LeaderEpochAnswer{LogStart: l.StartOffset()}
		ans.Epoch, ans.EndOffset = l.EndOffsetForEpoch(a.epoch)
		resp.answers = append(resp.answers, ans)
	}
	r.reply(m, resp)
}

func (r *sysReplica) serveFetch(m *sysMsg) {
	if e := r.epochMatches(m.epoch); e != 0 {
		r.reply(m, &sysMsg{kind: msgFetchResp, err: e, epoch: r.epoch})
		return
	}
	// The acknowledgements: every offset below a follower's fetch offset
	// is on its disk.
	for _, pos := range m.pos {
		l := r.logs[pos.part]
		if pos.off >= l.StartOffset() && pos.off <= l.EndOffset() && r.ldr != nil {
			r.ldr.FollowerFetch(m.from, r.tp(pos.part), pos.off, r.wall())
			r.raiseHW(pos.part, r.ldr.HighWatermark(r.tp(pos.part)), l.DurableEnd())
		}
	}
	parts, data := r.collect(m.pos)
	if !data {
		pk := &sysParked{m: m}
		r.parked = append(r.parked, pk)
		r.after(sysMaxWait, func() { r.answerParked(pk) })
		return
	}
	r.reply(m, &sysMsg{kind: msgFetchResp, epoch: r.epoch, parts: parts})
}

// collect reads every asked partition from the follower's offset up to
// the log end (not the high watermark: followers copy everything).
func (r *sysReplica) collect(pos []sysFetchPos) ([]sysFetchPart, bool) {
	var out []sysFetchPart
	data := false
	used := 0
	for _, q := range pos {
		l := r.logs[q.part]
		fp := sysFetchPart{part: q.part, logStart: l.StartOffset(), logEnd: l.EndOffset(), hw: r.hw[q.part]}
		switch {
		case q.off < fp.logStart || q.off > fp.logEnd:
			fp.code = codeOutOfRange
		case q.off < fp.logEnd && (used == 0 || used < sysMaxFetch):
			b, err := l.Read(q.off, max(sysMaxFetch-used, 1), fp.logEnd)
			switch {
			case errors.Is(err, storage.ErrOffsetOutOfRange):
				fp.code = codeOutOfRange
			case err != nil:
				r.w.fail("r%d partition %d: read at %d: %v", r.id, q.part, q.off, err)
			default:
				fp.records = slices.Clone(b)
				used += len(b)
			}
		}
		if fp.code != codeOK || len(fp.records) > 0 {
			data = true
		}
		out = append(out, fp)
	}
	return out, data
}

// wakeParked answers the held fetches that now have data.
func (r *sysReplica) wakeParked() {
	for _, pk := range slices.Clone(r.parked) {
		for _, q := range pk.m.pos {
			if r.logs[q.part].EndOffset() > q.off {
				r.answerParked(pk)
				break
			}
		}
	}
}

func (r *sysReplica) answerParked(pk *sysParked) {
	if pk.done {
		return
	}
	pk.done = true
	r.parked = slices.DeleteFunc(r.parked, func(x *sysParked) bool { return x == pk })
	// Leadership may have moved while the request waited.
	if e := r.epochMatches(pk.m.epoch); e != 0 {
		r.reply(pk.m, &sysMsg{kind: msgFetchResp, err: e, epoch: r.epoch})
		return
	}
	parts, _ := r.collect(pk.m.pos)
	r.reply(pk.m, &sysMsg{kind: msgFetchResp, epoch: r.epoch, parts: parts})
}

// Follower side of log shipping (shipping/follower.go), driven by the real
// replication.Fetcher.

// setLeader is Follower.SetLeader: the request in flight is abandoned.
func (r *sysReplica) setLeader(id, epoch int32) {
	r.cancelRequest()
	r.backoff = 0
	r.next(r.fetcher.NewLeader(id, epoch))
}

// clearLeader is Follower.ClearLeader.
func (r *sysReplica) clearLeader() {
	r.cancelRequest()
	r.next(r.fetcher.LeaderLost())
}

func (r *sysReplica) cancelRequest() {
	r.req, r.trunc = 0, nil
	r.folTok++
}

// next takes the fetcher's decision and runs it, after a backoff if the
// previous attempt failed.
func (r *sysReplica) next(a replication.Action) { r.nextAfter(a, 0) }

// nextAfter is next, no sooner than d from now.
func (r *sysReplica) nextAfter(a replication.Action, d time.Duration) {
	r.act = a
	r.folTok++
	tok := r.folTok
	if a.Backoff {
		r.backoff = min(max(2*r.backoff, sysMinBackoff), sysMaxBackoff)
		d = r.backoff
		r.act.Backoff = false
	}
	if a.Kind == replication.ActWait {
		return
	}
	r.after(d, func() {
		if tok == r.folTok {
			r.run()
		}
	})
}

func (r *sysReplica) succeeded() { r.backoff = 0 }

// run performs the current action until it needs the network.
func (r *sysReplica) run() {
	if r.ldr != nil {
		return // a leader does not follow (mayFollow)
	}
	for range 16 {
		a := r.act
		switch a.Kind {
		case replication.ActWait:
			return
		case replication.ActFetchManifest:
			// Every replica has the same topics; the manifest step only
			// moves the fetcher on.
			r.act = r.fetcher.ManifestApplied(a.Epoch, "static")
		case replication.ActTruncate:
			if r.trunc == nil {
				r.startTruncation()
			}
			sent, err := r.truncStep(a)
			if err != nil {
				r.w.tracef("r%d truncation failed: %v", r.id, err)
				r.trunc = nil
				r.next(r.fetcher.Failed(a.Epoch, replication.ErrTransient))
				return
			}
			if sent {
				return
			}
			r.trunc = nil
			r.succeeded()
			r.act = r.fetcher.TruncationDone(a.Epoch)
		case replication.ActResetPartition:
			if err := r.resetPartition(a.Partition, a.Offset); err != nil {
				r.next(r.fetcher.Failed(a.Epoch, replication.ErrTransient))
				return
			}
			r.act = r.fetcher.FetchResult(a.Epoch, "static")
		case replication.ActFetch:
			r.sendFetch(a)
			return
		}
		if r.act.Backoff {
			r.next(r.act)
			return
		}
	}
	// Never expected: the fetcher keeps asking for local steps.
	r.next(r.act)
}

func (r *sysReplica) request(m *sysMsg) {
	r.w.nreq++
	m.req, m.from, m.to = r.w.nreq, r.id, r.act.Leader
	r.req = m.req
	req := m.req
	epoch := r.act.Epoch
	r.w.send(m)
	r.after(sysMaxWait+sysReqTimeout, func() {
		if r.req == req {
			r.w.tracef("r%d request %d timed out", r.id, req)
			r.req, r.trunc = 0, nil
			r.next(r.fetcher.Failed(epoch, replication.ErrTransient))
		}
	})
}

func (r *sysReplica) followerLog(p int) replication.FollowerLog {
	l := r.logs[p]
	h := l.EpochHistory()
	fl := replication.FollowerLog{LogStart: l.StartOffset(), LogEnd: l.EndOffset(), History: make([]replication.EpochEntry, len(h))}
	for i, e := range h {
		fl.History[i] = replication.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return fl
}

func (r *sysReplica) startTruncation() {
	n := len(r.logs)
	t := &sysTrunc{d: make([]replication.TruncDecision, n), done: make([]bool, n)}
	for p := range r.logs {
		switch r.w.cfg.Mut {
		case mutNoTruncation:
			t.d[p] = replication.TruncDecision{Action: replication.TruncDone, Offset: r.logs[p].EndOffset()}
		case mutTruncateToHW:
			t.d[p] = replication.TruncDecision{Action: replication.TruncDone, Offset: r.hw[p]}
		default:
			t.d[p] = replication.StartTruncation(r.followerLog(p))
		}
	}
	r.trunc = t
}

// truncStep is one round of truncateAll: finish the partitions that are
// decided, truncate the ones whose next question needs it, and ask the
// leader about the rest. It reports whether a request was sent.
func (r *sysReplica) truncStep(a replication.Action) (bool, error) {
	t := r.trunc
	t.asked = t.asked[:0]
	req := &sysMsg{kind: msgEpochEndReq, epoch: a.Epoch}
	for p := range r.logs {
		if t.done[p] {
			continue
		}
		d := t.d[p]
		if d.Action != replication.TruncAsk {
			t.done[p] = true
			switch d.Action {
			case replication.TruncDone:
				if err := r.truncate(p, d.Offset, "truncation"); err != nil {
					return false, err
				}
			case replication.TruncReset:
				if err := r.resetPartition(r.tp(p), d.Offset); err != nil {
					return false, err
				}
			}
			continue
		}
		if d.Truncate {
			if err := r.truncate(p, d.Offset, "truncation (ask)"); err != nil {
				return false, err
			}
		}
		t.asked = append(t.asked, p)
		req.asks = append(req.asks, sysEpochAsk{part: p, epoch: d.Epoch})
	}
	if len(t.asked) == 0 {
		return false, nil
	}
	if t.round >= 64 {
		return false, errors.New("truncation does not converge")
	}
	t.round++
	r.request(req)
	return true, nil
}

func (r *sysReplica) onAnswer(m *sysMsg) {
	if m.req != r.req || r.req == 0 || r.ldr != nil {
		return // an answer to a request given up on
	}
	r.req = 0
	a := r.act
	if m.err != 0 {
		r.trunc = nil
		if m.err == replication.ErrNotLeader {
			r.w.ck.stats.notLeaderAnswers++
		}
		r.next(r.fetcher.Failed(a.Epoch, m.err))
		return
	}
	switch m.kind {
	case msgEpochEndResp:
		t := r.trunc
		if t == nil || a.Kind != replication.ActTruncate || len(m.answers) != len(t.asked) {
			return
		}
		for i, p := range t.asked {
			if ans := m.answers[i]; ans.Epoch >= 0 && ans.Epoch < t.d[p].Epoch {
				r.w.ck.stats.olderEpochAnswers++
			}
			t.d[p] = replication.DecideTruncation(r.followerLog(p), t.d[p].Epoch, m.answers[i])
			if r.w.tracing() {
				r.w.tracef("r%d partition %d: truncation decision %+v", r.id, p, t.d[p])
			}
		}
		r.next(r.act)
	case msgFetchResp:
		if a.Kind != replication.ActFetch {
			return
		}
		r.onFetchAnswer(a, m)
	}
}

// durableEnd is Follower.durableEnd: fsync if needed; the offset reported
// is the durable end, which must be the log end.
func (r *sysReplica) durableEnd(p int) (int64, bool) {
	l := r.logs[p]
	if r.w.cfg.Mut == mutFollowerNoSync {
		return l.EndOffset(), true
	}
	if l.DurableEnd() != l.EndOffset() {
		if _, err := l.Sync(); err != nil {
			r.w.fail("r%d partition %d: sync: %v", r.id, p, err)
			return 0, false
		}
	}
	return l.DurableEnd(), l.DurableEnd() == l.EndOffset()
}

func (r *sysReplica) sendFetch(a replication.Action) {
	req := &sysMsg{kind: msgFetchReq, epoch: a.Epoch}
	for p := range r.logs {
		end, ok := r.durableEnd(p)
		if !ok {
			continue
		}
		req.pos = append(req.pos, sysFetchPos{part: p, off: end})
	}
	r.request(req)
}

func (r *sysReplica) onFetchAnswer(a replication.Action, m *sysMsg) {
	var failed error
	synced := false
	// A follower's logs change only through its one request at a time,
	// so each log end is still the position the request reported.
	for _, p := range m.parts {
		l := r.logs[p.part]
		switch p.code {
		case codeOK:
			r.leaderPosition(p.part, p.hw)
			if len(p.records) == 0 {
				continue
			}
			synced = true
			if err := r.appendAll(p.part, l.EndOffset(), a.Epoch, p); err != nil {
				failed = err
			}
		case codeOutOfRange:
			d := r.fetcher.OffsetOutOfRange(a.Epoch, r.tp(p.part), l.EndOffset(), p.logStart, p.logEnd)
			if d.Kind == replication.ActResetPartition {
				if err := r.resetPartition(d.Partition, d.Offset); err != nil {
					failed = err
				}
			}
		}
	}
	if failed != nil {
		r.w.tracef("r%d fetch failed: %v", r.id, failed)
		r.next(r.fetcher.Failed(a.Epoch, replication.ErrTransient))
		return
	}
	r.succeeded()
	// The fsync of what was appended took the disk's time.
	var d time.Duration
	if synced {
		d = r.diskDelay
	}
	r.nextAfter(r.fetcher.FetchResult(a.Epoch, "static"), d)
}

// leaderPosition is sink.LeaderPosition: a follower's high watermark is the
// leader's, never above its own durable end.
func (r *sysReplica) leaderPosition(p int, hw int64) {
	if r.ldr != nil {
		return
	}
	if r.unclean {
		r.noteCatchUp(p, hw)
	}
	r.raiseHW(p, hw, r.logs[p].DurableEnd())
}

// appendAll is Follower.appendAll: validate and append each batch at its
// own offset, then fsync.
func (r *sysReplica) appendAll(p int, offset int64, epoch int32, fp sysFetchPart) error {
	l := r.logs[p]
	recs := fp.records
	next := offset
	latest := l.LatestEpoch()
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
		switch {
		case err != nil:
		case h.BaseOffset != next:
			err = fmt.Errorf("batch at offset %d, expected %d", h.BaseOffset, next)
		case h.LastOffsetDelta < 0 || h.LastOffset() >= fp.logEnd:
			err = fmt.Errorf("batch [%d, %d] beyond the leader's log end %d", h.BaseOffset, h.LastOffset(), fp.logEnd)
		case h.PartitionLeaderEpoch > epoch || h.PartitionLeaderEpoch < latest:
			err = fmt.Errorf("batch epoch %d outside [%d, %d]", h.PartitionLeaderEpoch, latest, epoch)
		}
		if err != nil {
			break
		}
		batch := recs[:h.Size()]
		if aerr := l.AppendReplica(batch); aerr != nil {
			err = fmt.Errorf("append at %d: %w", next, aerr)
			break
		}
		r.shadowAppend(p, batch)
		latest = max(latest, h.PartitionLeaderEpoch)
		next = h.LastOffset() + 1
		recs = recs[h.Size():]
	}
	if next > offset && r.w.cfg.Mut != mutFollowerNoSync {
		if _, serr := l.Sync(); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}
