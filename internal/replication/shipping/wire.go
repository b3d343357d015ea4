package shipping

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Paths of the endpoints Handler serves.
const (
	PathManifest = "/replication/manifest"
	PathEpochEnd = "/replication/epoch-end"
	PathFetch    = "/replication/fetch"
)

// HeaderLeaderEpoch carries, on every request, the leader epoch the
// follower believes in.
const HeaderLeaderEpoch = "X-Moonmq-Leader-Epoch"

// Error names carried in a 409 answer and in per-partition answers.
const (
	ErrNameFenced           = "FENCED_LEADER_EPOCH"
	ErrNameUnknownEpoch     = "UNKNOWN_LEADER_EPOCH"
	ErrNameNotLeader        = "NOT_LEADER"
	ErrNameUnknownTopic     = "UNKNOWN_TOPIC_OR_PARTITION"
	ErrNameOffsetOutOfRange = "OFFSET_OUT_OF_RANGE"
)

// codeNone is a fetch response partition's code for success (Kafka's NONE:
// kerr has no error for it).
const codeNone int16 = 0

// Per-partition error codes in a fetch response (Kafka's numbering, from
// kerr).
var (
	codeOffsetOutOfRange = kerr.OffsetOutOfRange.Code
	codeUnknownTopic     = kerr.UnknownTopicOrPartition.Code
	codeUnknownServer    = kerr.UnknownServerError.Code
)

// Limits on requests and responses.
const (
	// MaxRequestBytes bounds the body of an epoch-end or fetch request.
	MaxRequestBytes = 8 << 20
	// MaxRequestPartitions bounds the partitions of one request.
	MaxRequestPartitions = 100000
	// DefaultMaxResponseBytes is the leader's cap on the record bytes of
	// one fetch response (the first batch is always whole, KIP-74).
	DefaultMaxResponseBytes = 32 << 20
	// MaxWait bounds the long-poll a follower may ask for.
	MaxWait = 30_000 // milliseconds
)

// TopicInfo describes one topic in a manifest.
type TopicInfo struct {
	// Name is the topic name.
	Name string `json:"name"`
	// ID is the topic's incarnation id: a topic deleted and recreated
	// under the same name gets a new one.
	ID string `json:"id"`
	// Partitions is the partition count.
	Partitions int32 `json:"partitions"`
	// Configs are the topic's configs (only the explicitly set ones).
	Configs map[string]string `json:"configs,omitempty"`
	// MetaIndex is, in cluster mode, the index of the cluster metadata
	// log at which the leader's copy of that log held the topic; 0
	// outside cluster mode. A follower keeps it, so that once promoted it
	// can tell a topic its own copy has seen from one it has not.
	MetaIndex uint64 `json:"metaIndex,omitempty"`
}

// Manifest is the answer to GET /replication/manifest.
type Manifest struct {
	// Epoch is the leader's epoch.
	Epoch int32 `json:"epoch"`
	// Digest summarizes the leader's metadata; a fetch response carries
	// the current one, and a change sends the follower back here.
	Digest string `json:"digest"`
	// Topics is the leader's topic list.
	Topics []TopicInfo `json:"topics"`
}

// EpochEndRequest is the body of POST /replication/epoch-end.
type EpochEndRequest struct {
	// Partitions lists the questions.
	Partitions []EpochEndQuery `json:"partitions"`
}

// EpochEndQuery asks where epoch Epoch of one partition ends.
type EpochEndQuery struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
}

// EpochEndResponse is the answer to POST /replication/epoch-end, one entry
// per question, in order.
type EpochEndResponse struct {
	Partitions []EpochEndAnswer `json:"partitions"`
}

// EpochEndAnswer is the leader's KIP-279 answer for one partition: the
// largest epoch <= the one asked (-1 if none) and where it ends, and the
// leader's log start. Error is empty or ErrNameUnknownTopic.
type EpochEndAnswer struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
	EndOffset int64  `json:"endOffset"`
	LogStart  int64  `json:"logStart"`
	Error     string `json:"error,omitempty"`
}

// FetchRequest is the body of POST /replication/fetch.
type FetchRequest struct {
	// Replica is the follower's replica id.
	Replica int32 `json:"replica"`
	// MaxBytes bounds the record bytes of the answer (the first batch is
	// always whole).
	MaxBytes int32 `json:"maxBytes"`
	// MaxWaitMs is how long the leader may hold the request when there
	// is nothing new.
	MaxWaitMs int32 `json:"maxWaitMs"`
	// Partitions carry the follower's durable log end per partition.
	Partitions []FetchPosition `json:"partitions"`
	// PositionsOnly asks for no records: a follower that cannot append
	// (its disk is full) still learns the leader's high watermark and log
	// start, whose retention frees its disk. Its positions are not taken
	// as acknowledgements, nor as catching up: the leader's lag rule takes
	// it out of the ISR, and does not take it back, while it asks so.
	PositionsOnly bool `json:"positionsOnly,omitempty"`
}

// Binary framing of a fetch request (big endian), which followers send
// with Content-Type application/octet-stream: decoding the JSON form of a
// request naming every followed partition was a fifth of the leader's
// samples with 64 partitions, one record at a time. The leader still
// takes the JSON form of FetchRequest (for curl, and for followers of
// builds before this framing).
//
//	magic "MQF1"
//	i32 replica, i32 max bytes, i32 max wait ms, u8 flags (1: positions only)
//	u32 partition count, then per partition:
//	  u16 topic length, topic, i32 partition, i64 offset
const fetchRequestMagic = "MQF1"

// ContentTypeBinary marks a binary fetch request or response.
const ContentTypeBinary = "application/octet-stream"

const flagPositionsOnly = 1

const positionFixed = 2 + 4 + 8

// appendBinary appends r's binary framing to b.
func (r *FetchRequest) appendBinary(b []byte) []byte {
	b = append(b, fetchRequestMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Replica))
	b = binary.BigEndian.AppendUint32(b, uint32(r.MaxBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(r.MaxWaitMs))
	var flags byte
	if r.PositionsOnly {
		flags |= flagPositionsOnly
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Partitions)))
	for _, p := range r.Partitions {
		b = appendTopicPartition(b, p.Topic, p.Partition)
		b = binary.BigEndian.AppendUint64(b, uint64(p.Offset))
	}
	return b
}

// appendTopicPartition appends how both frames name a partition: u16
// topic length, topic, i32 partition.
func appendTopicPartition(b []byte, topic string, partition int32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return binary.BigEndian.AppendUint32(b, uint32(partition))
}

// decodeFetchRequest parses a binary fetch request. Partitions of one
// topic share one topic string, as they share it in the follower's list.
func decodeFetchRequest(b []byte) (FetchRequest, error) {
	d := decoder{b: b}
	if string(d.bytes(len(fetchRequestMagic))) != fetchRequestMagic {
		return FetchRequest{}, fmt.Errorf("%w: bad magic", errFrame)
	}
	r := FetchRequest{Replica: int32(d.u32()), MaxBytes: int32(d.u32()), MaxWaitMs: int32(d.u32())}
	if flags := d.bytes(1); flags != nil {
		if flags[0]&^flagPositionsOnly != 0 {
			return FetchRequest{}, fmt.Errorf("%w: unknown flags %#x", errFrame, flags[0])
		}
		r.PositionsOnly = flags[0]&flagPositionsOnly != 0
	}
	n := d.u32()
	if d.err != nil || uint64(n)*positionFixed > uint64(len(d.b)) {
		return FetchRequest{}, fmt.Errorf("%w: bad partition count", errFrame)
	}
	if n > MaxRequestPartitions {
		return FetchRequest{}, errTooManyPartitions
	}
	r.Partitions = make([]FetchPosition, 0, n)
	topic := ""
	for range n {
		name := d.bytes(int(d.u16()))
		if string(name) != topic { // compared without allocating
			topic = string(name)
		}
		p := FetchPosition{Topic: topic, Partition: int32(d.u32()), Offset: int64(d.u64())}
		if d.err != nil {
			return FetchRequest{}, d.err
		}
		r.Partitions = append(r.Partitions, p)
	}
	if len(d.b) != 0 {
		return FetchRequest{}, fmt.Errorf("%w: %d trailing bytes", errFrame, len(d.b))
	}
	return r, nil
}

var errTooManyPartitions = errors.New("too many partitions")

// FetchPosition is one partition of a fetch request: Offset is the
// follower's durable log end, the offset to fetch from.
type FetchPosition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// errorBody is the JSON body of every non-200 answer.
type errorBody struct {
	Error string `json:"error"`
	Epoch int32  `json:"epoch,omitempty"`
}

// fetchPart is one partition of a fetch response.
type fetchPart struct {
	topic     string
	partition int32
	code      int16
	hw        int64
	logStart  int64
	logEnd    int64
	records   []byte
}

// fetchResponse is the decoded binary fetch response.
type fetchResponse struct {
	digest string
	parts  []fetchPart
	// bufs are the leader's pooled read buffers the records alias
	// (release).
	bufs []*[]byte
}

// Binary framing of a fetch response (big endian):
//
//	magic "MQS1"
//	u16 digest length, digest
//	u32 partition count, then per partition:
//	  u16 topic length, topic, i32 partition, i16 error code,
//	  i64 high watermark, i64 log start, i64 log end,
//	  u32 records length, records (stored batches, verbatim)
const fetchMagic = "MQS1"

const partFixed = 2 + 4 + 2 + 8 + 8 + 8 + 4

func (r *fetchResponse) size() int {
	n := len(fetchMagic) + 2 + len(r.digest) + 4
	for _, p := range r.parts {
		n += partFixed + len(p.topic) + len(p.records)
	}
	return n
}

func (r *fetchResponse) encode() []byte {
	var b bytes.Buffer
	b.Grow(r.size())
	_ = r.writeTo(&b) // a bytes.Buffer does not fail
	return b.Bytes()
}

// writeTo writes the encoded response to w (size() bytes). The records go
// to w as they are, so the leader never copies a whole answer (often
// megabytes, once per follower fetch) into a buffer of its own first.
func (r *fetchResponse) writeTo(w io.Writer) error {
	hdr := make([]byte, 0, 64)
	hdr = append(hdr, fetchMagic...)
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(r.digest)))
	hdr = append(hdr, r.digest...)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(r.parts)))
	for _, p := range r.parts {
		hdr = appendTopicPartition(hdr, p.topic, p.partition)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(p.code))
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(p.hw))
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(p.logStart))
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(p.logEnd))
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(p.records)))
		if len(p.records) == 0 {
			continue // small: gathered with the next header
		}
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		if _, err := w.Write(p.records); err != nil {
			return err
		}
		hdr = hdr[:0]
	}
	if len(hdr) > 0 {
		_, err := w.Write(hdr)
		return err
	}
	return nil
}

var errFrame = errors.New("shipping: malformed fetch frame")

// decodeFetchResponse parses b; records alias b.
func decodeFetchResponse(b []byte) (*fetchResponse, error) {
	d := decoder{b: b}
	if string(d.bytes(len(fetchMagic))) != fetchMagic {
		return nil, fmt.Errorf("%w: bad magic", errFrame)
	}
	r := &fetchResponse{digest: string(d.bytes(int(d.u16())))}
	n := d.u32()
	if d.err != nil || uint64(n)*partFixed > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: bad partition count", errFrame)
	}
	r.parts = make([]fetchPart, 0, n)
	for range n {
		var p fetchPart
		p.topic = string(d.bytes(int(d.u16())))
		p.partition = int32(d.u32())
		p.code = int16(d.u16())
		p.hw = int64(d.u64())
		p.logStart = int64(d.u64())
		p.logEnd = int64(d.u64())
		p.records = d.bytes(int(d.u32()))
		if d.err != nil {
			return nil, d.err
		}
		r.parts = append(r.parts, p)
	}
	if d.err == nil && len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errFrame, len(d.b))
	}
	return r, d.err
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) || n > math.MaxInt32 {
		d.err = fmt.Errorf("%w: truncated", errFrame)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u16() uint16 {
	if v := d.bytes(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.bytes(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.bytes(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}
