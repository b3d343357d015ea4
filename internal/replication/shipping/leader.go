package shipping

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
)

// PartitionLog is what the leader side reads from one partition's log;
// *storage.Log implements it.
type PartitionLog interface {
	// ReadInto returns whole stored batches from offset, in dst's memory
	// when it is large enough (storage.Log.ReadInto).
	ReadInto(dst []byte, offset int64, maxBytes int, limit int64) ([]byte, error)
	// StartOffset is the log start offset.
	StartOffset() int64
	// EndOffset is the log end offset.
	EndOffset() int64
	// EndOffsetForEpoch answers KIP-279's question for epoch.
	EndOffsetForEpoch(epoch int32) (foundEpoch int32, endOffset int64)
}

// Source is the leader's side of log shipping, implemented by the broker.
// Its methods are called concurrently from HTTP handlers.
type Source interface {
	// LeaderEpoch returns the epoch this replica leads in; ok is false
	// when it is not the leader (requests get 409 NOT_LEADER).
	LeaderEpoch() (epoch int32, ok bool)
	// Manifest returns the metadata digest and the topic list. The digest
	// must not be newer than the list (read it first): a follower that
	// applied a list newer than its digest merely reads the manifest
	// once more.
	Manifest() (digest string, topics []TopicInfo)
	// Digest returns the current metadata digest, cheaply (every fetch
	// response carries it). At most 65535 bytes.
	Digest() string
	// Partition returns the log of tp, if the leader has it.
	Partition(tp replication.TopicPartition) (PartitionLog, bool)
	// HighWatermark returns tp's high watermark.
	HighWatermark(tp replication.TopicPartition) int64
	// OnFollowerFetch reports that replica fetched each of reports from
	// its Offset, its durable log end there: every offset below it is on
	// its disk. One call carries a fetch's partitions (all of those the
	// follower follows), so the broker feeds replication.Leader.
	// FollowerFetch with them under one lock and one clock reading.
	OnFollowerFetch(replica int32, reports []FetchPosition)
	// WaitForData returns when the log end of one of parts passes its
	// offset (is > Offset), when wait has passed or when ctx ends. A
	// partition unknown or deleted meanwhile does not end the wait: the
	// others may still get data, and the next answer reports it. One
	// waiter over all of parts, not one per partition: a follower's
	// long-poll covers every partition it follows.
	WaitForData(ctx context.Context, parts []FetchPosition, wait time.Duration)
}

// HandlerOption configures Handler.
type HandlerOption func(*handler)

// WithMaxResponseBytes caps the record bytes of one fetch response
// (default DefaultMaxResponseBytes); the first batch is always whole.
func WithMaxResponseBytes(n int) HandlerOption {
	return func(h *handler) {
		if n > 0 {
			h.maxResponse = n
		}
	}
}

// WithLogger sets the handler's logger.
func WithLogger(l *slog.Logger) HandlerOption {
	return func(h *handler) {
		if l != nil {
			h.log = l
		}
	}
}

// Handler returns the leader side of log shipping: the manifest, epoch-end
// and fetch endpoints under /replication/ (mount it with
// mux.Handle("/replication/", h)). When token is not empty every request
// must carry "Authorization: Bearer <token>" (401 otherwise).
func Handler(src Source, token string, opts ...HandlerOption) http.Handler {
	h := &handler{src: src, token: token, maxResponse: DefaultMaxResponseBytes, log: slog.Default()}
	for _, o := range opts {
		o(h)
	}
	return h
}

type handler struct {
	src         Source
	token       string
	maxResponse int
	log         *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !auth.BearerOK(r, h.token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="replication"`)
		writeError(w, http.StatusUnauthorized, errorBody{Error: "UNAUTHORIZED"})
		return
	}
	var method string
	var serve func(http.ResponseWriter, *http.Request, int32)
	switch r.URL.Path {
	case PathManifest:
		method, serve = http.MethodGet, h.manifest
	case PathEpochEnd:
		method, serve = http.MethodPost, h.epochEnd
	case PathFetch:
		method, serve = http.MethodPost, h.fetch
	default:
		writeError(w, http.StatusNotFound, errorBody{Error: "NOT_FOUND"})
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, errorBody{Error: "METHOD_NOT_ALLOWED"})
		return
	}
	epoch, ok := h.checkEpoch(w, r)
	if !ok {
		return
	}
	serve(w, r, epoch)
}

// checkEpoch compares the follower's epoch with the leader's (KIP-320) and
// answers 409 when they differ.
func (h *handler) checkEpoch(w http.ResponseWriter, r *http.Request) (int32, bool) {
	asked, err := strconv.ParseInt(r.Header.Get(HeaderLeaderEpoch), 10, 32)
	if err != nil || asked < 0 {
		writeError(w, http.StatusBadRequest, errorBody{Error: "missing or bad " + HeaderLeaderEpoch})
		return 0, false
	}
	return h.epochMatches(w, int32(asked))
}

func (h *handler) epochMatches(w http.ResponseWriter, asked int32) (int32, bool) {
	epoch, leader := h.src.LeaderEpoch()
	switch {
	case !leader:
		writeError(w, http.StatusConflict, errorBody{Error: ErrNameNotLeader, Epoch: epoch})
	case asked < epoch:
		writeError(w, http.StatusConflict, errorBody{Error: ErrNameFenced, Epoch: epoch})
	case asked > epoch:
		writeError(w, http.StatusConflict, errorBody{Error: ErrNameUnknownEpoch, Epoch: epoch})
	default:
		return epoch, true
	}
	return 0, false
}

func (h *handler) manifest(w http.ResponseWriter, _ *http.Request, epoch int32) {
	digest, topics := h.src.Manifest()
	if topics == nil {
		topics = []TopicInfo{}
	}
	writeJSON(w, http.StatusOK, Manifest{Epoch: epoch, Digest: digest, Topics: topics})
}

// decodeBody reads a bounded JSON request body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readRequest(w, r)
	if !ok {
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, errorBody{Error: "bad request: " + err.Error()})
		return false
	}
	return true
}

// readRequest reads a bounded request body.
func readRequest(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, errorBody{Error: "request too large"})
		} else {
			writeError(w, http.StatusBadRequest, errorBody{Error: "reading request: " + err.Error()})
		}
		return nil, false
	}
	return body, true
}

// decodeFetch reads a fetch request in its binary framing or, without
// that Content-Type, as JSON.
func decodeFetch(w http.ResponseWriter, r *http.Request, req *FetchRequest) bool {
	if r.Header.Get("Content-Type") != ContentTypeBinary {
		return decodeBody(w, r, req)
	}
	body, ok := readRequest(w, r)
	if !ok {
		return false
	}
	var err error
	*req, err = decodeFetchRequest(body)
	switch {
	case errors.Is(err, errTooManyPartitions):
		writeError(w, http.StatusRequestEntityTooLarge, errorBody{Error: err.Error()})
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, errorBody{Error: "bad request: " + err.Error()})
		return false
	}
	return true
}

func (h *handler) epochEnd(w http.ResponseWriter, r *http.Request, _ int32) {
	var req EpochEndRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Partitions) > MaxRequestPartitions {
		writeError(w, http.StatusRequestEntityTooLarge, errorBody{Error: "too many partitions"})
		return
	}
	resp := EpochEndResponse{Partitions: make([]EpochEndAnswer, 0, len(req.Partitions))}
	for _, q := range req.Partitions {
		a := EpochEndAnswer{Topic: q.Topic, Partition: q.Partition, Epoch: -1, EndOffset: -1, LogStart: -1}
		if l, ok := h.src.Partition(replication.TopicPartition{Topic: q.Topic, Partition: q.Partition}); ok {
			a.LogStart = l.StartOffset()
			a.Epoch, a.EndOffset = l.EndOffsetForEpoch(q.Epoch)
		} else {
			a.Error = ErrNameUnknownTopic
		}
		resp.Partitions = append(resp.Partitions, a)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *handler) fetch(w http.ResponseWriter, r *http.Request, epoch int32) {
	var req FetchRequest
	if !decodeFetch(w, r, &req) {
		return
	}
	if len(req.Partitions) > MaxRequestPartitions {
		writeError(w, http.StatusRequestEntityTooLarge, errorBody{Error: "too many partitions"})
		return
	}
	for _, p := range req.Partitions {
		if len(p.Topic) == 0 || len(p.Topic) > math.MaxUint16 || p.Partition < 0 || p.Offset < 0 {
			writeError(w, http.StatusBadRequest, errorBody{Error: "bad partition in request"})
			return
		}
	}
	maxBytes := h.maxResponse
	if req.MaxBytes > 0 && int(req.MaxBytes) < maxBytes {
		maxBytes = int(req.MaxBytes)
	}
	if req.PositionsOnly {
		maxBytes = 0
	}
	wait := time.Duration(min(max(req.MaxWaitMs, 0), MaxWait)) * time.Millisecond

	// The acknowledgements: every offset below the follower's durable end
	// is on its disk. A follower fetching positions only cannot append:
	// its position does not count, so the lag rule takes it out of the
	// ISR and it is not taken back while it stays so (at a high
	// watermark held at its position it would look caught up).
	if !req.PositionsOnly {
		reports := make([]FetchPosition, 0, len(req.Partitions))
		for _, p := range req.Partitions {
			tp := replication.TopicPartition{Topic: p.Topic, Partition: p.Partition}
			if l, ok := h.src.Partition(tp); ok && p.Offset >= l.StartOffset() && p.Offset <= l.EndOffset() {
				reports = append(reports, p)
			}
		}
		if len(reports) > 0 {
			h.src.OnFollowerFetch(req.Replica, reports)
		}
	}

	resp, data := h.collect(req.Partitions, maxBytes)
	defer func() { resp.release() }()
	if !data && wait > 0 {
		resp.release()
		h.src.WaitForData(r.Context(), req.Partitions, wait)
		if r.Context().Err() != nil {
			return
		}
		// Leadership may have moved while the request waited.
		if _, ok := h.epochMatches(w, epoch); !ok {
			return
		}
		resp, _ = h.collect(req.Partitions, maxBytes)
	}
	if len(resp.digest) > math.MaxUint16 {
		writeError(w, http.StatusInternalServerError, errorBody{Error: "digest too long"})
		return
	}
	w.Header().Set("Content-Type", ContentTypeBinary)
	w.Header().Set("Content-Length", strconv.Itoa(resp.size()))
	w.WriteHeader(http.StatusOK)
	_ = resp.writeTo(w) // a follower that went away retries
}

// readBufs holds the buffers fetch answers' records are read into: a
// fresh buffer per follower fetch (megabytes, zeroed by the allocator)
// was a fifth of the leader's CPU under acks=all load (docs/BENCHMARKS.md).
var readBufs = sync.Pool{New: func() any { return new([]byte) }}

// release returns r's read buffers to readBufs; r's records must not be
// used after.
func (r *fetchResponse) release() {
	for _, bp := range r.bufs {
		readBufs.Put(bp)
	}
	r.bufs = nil
}

// collect reads every partition from the follower's offset. data reports
// whether the answer holds any records or a per-partition error (either
// ends a long-poll).
func (h *handler) collect(parts []FetchPosition, maxBytes int) (resp *fetchResponse, data bool) {
	resp = &fetchResponse{digest: h.src.Digest(), parts: make([]fetchPart, 0, len(parts))}
	used := 0
	for _, p := range parts {
		tp := replication.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		fp := fetchPart{topic: p.Topic, partition: p.Partition, hw: -1, logStart: -1, logEnd: -1}
		l, ok := h.src.Partition(tp)
		if !ok {
			fp.code = codeUnknownTopic
			resp.parts = append(resp.parts, fp)
			data = true
			continue
		}
		fp.logStart, fp.logEnd = l.StartOffset(), l.EndOffset()
		fp.hw = h.src.HighWatermark(tp)
		switch {
		case p.Offset < fp.logStart || p.Offset > fp.logEnd:
			fp.code = codeOffsetOutOfRange
		case p.Offset < fp.logEnd && maxBytes > 0 && (used == 0 || used < maxBytes):
			// Not limited by the high watermark: followers copy
			// everything up to the log end read above.
			bp := readBufs.Get().(*[]byte)
			recs, err := l.ReadInto(*bp, p.Offset, max(maxBytes-used, 1), fp.logEnd)
			if cap(recs) > cap(*bp) {
				*bp = recs[:0] // read into a new, larger buffer: keep that one
			}
			resp.bufs = append(resp.bufs, bp)
			switch {
			case errors.Is(err, storage.ErrOffsetOutOfRange):
				fp.code = codeOffsetOutOfRange
				fp.logStart, fp.logEnd = l.StartOffset(), l.EndOffset()
			case err != nil:
				h.log.Warn("replication fetch: read failed", "topic", p.Topic, "partition", p.Partition, "offset", p.Offset, "err", err)
				fp.code = codeUnknownServer
			default:
				if used > 0 {
					// Only the first partition with data may exceed
					// the budget (KIP-74).
					recs = wholeBatchesWithin(recs, maxBytes-used)
				}
				fp.records = recs
				used += len(recs)
			}
		}
		if fp.code != codeNone || len(fp.records) > 0 {
			data = true
		}
		resp.parts = append(resp.parts, fp)
	}
	return resp, data
}

// wholeBatchesWithin returns the longest prefix of recs made of whole
// batches and at most n bytes.
func wholeBatchesWithin(recs []byte, n int) []byte {
	if len(recs) <= n {
		return recs
	}
	end := 0
	for end < len(recs) {
		h, err := recordbatch.ParseHeader(recs[end:])
		if err != nil || end+h.Size() > n {
			break
		}
		end += h.Size()
	}
	return recs[:end]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, e errorBody) {
	writeJSON(w, status, e)
}
