// Package protocol owns the Kafka wire framing: size-prefixed frames,
// request and response headers, the table of API versions the broker
// advertises, and the guards that keep a hostile frame from making the
// broker allocate far beyond the bytes it sent.
//
// Message bodies are encoded and decoded by franz-go's kmsg; this package
// never hand-rolls them. It may not touch storage, topics or sockets beyond
// the io.Reader it is handed.
package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MaxNonProduceFrame caps every request other than Produce. kmsg allocates
// an array's elements before reading them, bounded only by "one wire byte
// per element", and an element can be 64 bytes in memory; capping the
// frames that have no reason to be large bounds that amplification.
const MaxNonProduceFrame = 1 << 20

// produceMinTopicBytes is the wire size we require per topic entry a
// Produce claims before letting kmsg allocate the entries. A real entry is
// far larger (name, partition array, at least one 61-byte batch).
const produceMinTopicBytes = 8

// Errors returned by ReadFrame and ParseRequest. Each one means the
// connection must be closed.
var (
	ErrFrameTooLarge     = errors.New("frame larger than the configured maximum")
	ErrNegativeLength    = errors.New("negative frame length")
	ErrUnknownAPI        = errors.New("unknown or unsupported API key")
	ErrUnsupportedVer    = errors.New("unsupported API version")
	ErrMalformed         = errors.New("malformed request")
	ErrApiVersionsTooNew = errors.New("ApiVersions version newer than supported")
)

// VersionRange is the inclusive range of versions the broker serves for an
// API key.
type VersionRange struct{ Min, Max int16 }

// Table maps API keys to the versions the broker serves.
type Table map[int16]VersionRange

// ReadFrame reads one size-prefixed frame from r into a new slice. It
// rejects negative lengths and lengths over max before allocating.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	return ReadFrameInto(r, max, nil)
}

// ReadFrameInto is ReadFrame reading into buf's memory when the frame fits
// in its capacity; the result aliases buf then.
func ReadFrameInto(r io.Reader, max int, buf []byte) ([]byte, error) {
	n, err := ReadFrameSize(r, max)
	if err != nil {
		return nil, err
	}
	return ReadFrameBody(r, n, buf)
}

// ReadFrameSize reads a frame's 4-byte size and checks it: not negative,
// not over max, not shorter than a request header. The caller then reads
// the body with ReadFrameBody, so it can decide where the bytes go (and
// whether they may be read yet) knowing how many are coming.
func ReadFrameSize(r io.Reader, max int) (int, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 {
		return 0, fmt.Errorf("%w: %d", ErrNegativeLength, n)
	}
	if int64(n) > int64(max) {
		return 0, fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, max)
	}
	if n < 8 {
		return 0, fmt.Errorf("%w: frame of %d bytes is shorter than a request header", ErrMalformed, n)
	}
	return int(n), nil
}

// ReadFrameBody reads a frame body of n bytes (from ReadFrameSize) into
// buf's memory when it fits, else into new memory. A body larger than
// eagerFrameBytes gets memory as its bytes arrive, so a client that
// announces 100 MiB and sends nothing costs little, and the buffer never
// grows past n.
func ReadFrameBody(r io.Reader, n int, buf []byte) ([]byte, error) {
	if n <= cap(buf) {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	if n <= eagerFrameBytes {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	buf = make([]byte, 0, eagerFrameBytes)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// ReadFrameBodyInSteps reads a frame body of len(buf) bytes into buf with
// reads of at most step bytes, and after each calls arrived with how many
// bytes of buf have arrived, so the caller can work on them while the
// CPU's caches still hold them.
func ReadFrameBodyInSteps(r io.Reader, buf []byte, step int, arrived func(n int)) error {
	for got := 0; got < len(buf); {
		m, err := io.ReadAtLeast(r, buf[got:min(got+step, len(buf))], 1)
		got += m
		if err != nil {
			if err == io.EOF && got > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		arrived(got)
	}
	return nil
}

// eagerFrameBytes is the largest frame whose whole buffer is allocated
// before its bytes arrive.
const eagerFrameBytes = 1 << 20

// Header is a parsed request header.
type Header struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      *string
}

// Request is a decoded request with its header.
type Request struct {
	Header
	Body kmsg.Request
}

// ParseRequest decodes a frame's header and body. For an ApiVersions request
// of a version newer than the table allows it returns the header and
// ErrApiVersionsTooNew, so the caller can answer with the v0-shaped error
// clients expect. Any other error means the frame must be refused.
func ParseRequest(frame []byte, table Table) (Request, error) {
	var req Request
	if len(frame) < 8 {
		return req, fmt.Errorf("%w: %d-byte frame", ErrMalformed, len(frame))
	}
	req.Key = int16(binary.BigEndian.Uint16(frame[0:]))
	req.Version = int16(binary.BigEndian.Uint16(frame[2:]))
	req.CorrelationID = int32(binary.BigEndian.Uint32(frame[4:]))
	vr, ok := table[req.Key]
	if !ok {
		return req, fmt.Errorf("%w: key %d", ErrUnknownAPI, req.Key)
	}
	if req.Key == 18 && req.Version > vr.Max {
		return req, ErrApiVersionsTooNew
	}
	if req.Version < vr.Min || req.Version > vr.Max {
		return req, fmt.Errorf("%w: %s v%d (serving v%d-v%d)", ErrUnsupportedVer, kmsg.NameForKey(req.Key), req.Version, vr.Min, vr.Max)
	}
	if req.Key != 0 && len(frame) > MaxNonProduceFrame {
		return req, fmt.Errorf("%w: %s request of %d bytes exceeds %d", ErrFrameTooLarge, kmsg.NameForKey(req.Key), len(frame), MaxNonProduceFrame)
	}
	body := kmsg.RequestForKey(req.Key)
	if body == nil {
		return req, fmt.Errorf("%w: key %d", ErrUnknownAPI, req.Key)
	}
	body.SetVersion(req.Version)
	rest := frame[8:]
	clientID, rest, err := readNullableString(rest)
	if err != nil {
		return req, err
	}
	req.ClientID = clientID
	if body.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return req, err
		}
	}
	if req.Key == 0 {
		if err := checkProduceCounts(rest, req.Version); err != nil {
			return req, err
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return req, fmt.Errorf("%w: %s v%d body: %v", ErrMalformed, kmsg.NameForKey(req.Key), req.Version, err)
	}
	req.Body = body
	return req, nil
}

func readNullableString(b []byte) (*string, []byte, error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("%w: truncated client id", ErrMalformed)
	}
	n := int16(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n < 0 {
		return nil, b, nil
	}
	if int(n) > len(b) {
		return nil, nil, fmt.Errorf("%w: client id length %d beyond frame", ErrMalformed, n)
	}
	s := string(b[:n])
	return &s, b[n:], nil
}

// skipTags skips a header's tagged fields, whose sizes are client-supplied
// and therefore checked against what is left of the frame.
func skipTags(b []byte) ([]byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d header tags in %d bytes", ErrMalformed, n, len(b))
	}
	for i := uint64(0); i < n; i++ {
		if _, b, err = uvarint(b); err != nil {
			return nil, err
		}
		var sz uint64
		if sz, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if sz > uint64(len(b)) {
			return nil, fmt.Errorf("%w: header tag of %d bytes beyond frame", ErrMalformed, sz)
		}
		b = b[sz:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || v > 1<<31 {
		return 0, nil, fmt.Errorf("%w: bad varint", ErrMalformed)
	}
	return v, b[n:], nil
}

// checkProduceCounts bounds the topic count of a Produce body by the bytes
// that follow it, before kmsg allocates one 64-byte element per claimed
// topic. Produce is the one request allowed to be large, so it is the one
// whose amplification matters.
func checkProduceCounts(b []byte, version int16) error {
	flexible := version >= 9
	if version >= 3 { // transactional id
		if flexible {
			n, rest, err := uvarint(b)
			if err != nil {
				return err
			}
			if n > 0 {
				n--
			}
			if n > uint64(len(rest)) {
				return fmt.Errorf("%w: transactional id beyond frame", ErrMalformed)
			}
			b = rest[n:]
		} else {
			_, rest, err := readNullableString(b)
			if err != nil {
				return err
			}
			b = rest
		}
	}
	if len(b) < 6 {
		return fmt.Errorf("%w: truncated produce request", ErrMalformed)
	}
	b = b[6:] // acks, timeout
	var count uint64
	if flexible {
		n, rest, err := uvarint(b)
		if err != nil {
			return err
		}
		if n > 0 {
			n--
		}
		count, b = n, rest
	} else {
		if len(b) < 4 {
			return fmt.Errorf("%w: truncated produce request", ErrMalformed)
		}
		c := int32(binary.BigEndian.Uint32(b))
		if c < 0 {
			c = 0
		}
		count, b = uint64(c), b[4:]
	}
	if count*produceMinTopicBytes > uint64(len(b)) {
		return fmt.Errorf("%w: produce claims %d topics in %d bytes", ErrMalformed, count, len(b))
	}
	return nil
}

// AppendResponse appends a size-prefixed response frame for a request of the
// given header. ApiVersions responses always use header v0 (no tag byte),
// which clients rely on to parse the answer before they know our versions.
func AppendResponse(dst []byte, h Header, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.CorrelationID))
	if resp.IsFlexible() && h.Key != 18 {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// ApiVersionsTooNew builds the v0-shaped UNSUPPORTED_VERSION answer for an
// ApiVersions request of a version the broker does not know: the client
// reads our key list from it and retries at a version we serve.
func ApiVersionsTooNew(table Table) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = ApiKeys(table)
	return resp
}

// ApiKeys lists the table in key order for an ApiVersions response.
func ApiKeys(table Table) []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(table))
	for k, vr := range table {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: vr.Min, MaxVersion: vr.Max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
