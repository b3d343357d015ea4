package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// RecordHeader is one record header. A nil Value is a null value.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one decoded record. Key and Value are nil when null; otherwise
// they alias the batch (uncompressed) or the decompressed buffer, so callers
// that keep them past the batch's lifetime must copy.
type Record struct {
	Offset     int64
	Timestamp  int64
	Attributes int8
	Key        []byte
	Value      []byte
	Headers    []RecordHeader
}

// Records decodes the records of one whole batch (as returned by Split or
// read from a log). Decompression stops with ErrTooLarge once more than
// maxDecompressed bytes would be produced. The CRC is not re-checked.
func Records(batch []byte, maxDecompressed int) ([]Record, error) {
	h, err := ParseHeader(batch)
	if err != nil {
		return nil, err
	}
	if h.Size() > len(batch) {
		return nil, fmt.Errorf("%w: batch length %d exceeds the %d bytes given", ErrCorrupt, h.BatchLength, len(batch)-LengthOverhead)
	}
	data := batch[HeaderSize:h.Size()]
	if h.RecordsCount < 0 {
		return nil, fmt.Errorf("%w: records count %d", ErrCorrupt, h.RecordsCount)
	}
	if c := h.Codec(); c != CodecNone {
		data, err = decompress(c, data, maxDecompressed)
		if err != nil {
			return nil, err
		}
	}
	// Bound the slice we allocate by what the bytes can actually hold, so a
	// lying count cannot make us allocate.
	if int(h.RecordsCount) > len(data)/minRecordEncoding {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, h.RecordsCount, len(data))
	}
	recs := make([]Record, h.RecordsCount)
	d := decoder{b: data}
	for i := range recs {
		if err := d.record(&recs[i], h); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record", ErrCorrupt, len(d.b))
	}
	return recs, nil
}

var errTruncated = fmt.Errorf("%w: truncated record", ErrCorrupt)

type decoder struct{ b []byte }

func (d *decoder) varint() (int64, error) {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		return 0, errTruncated
	}
	d.b = d.b[n:]
	return v, nil
}

// bytes reads a length-prefixed field; -1 means null.
func (d *decoder) bytes() ([]byte, error) {
	n, err := d.varint()
	if err != nil {
		return nil, err
	}
	if n == -1 {
		return nil, nil
	}
	if n < 0 || n > int64(len(d.b)) {
		return nil, errTruncated
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) record(r *Record, h Header) error {
	n, err := d.varint()
	if err != nil {
		return err
	}
	if n < minRecordEncoding-1 || n > int64(len(d.b)) {
		return fmt.Errorf("%w: record length %d", ErrCorrupt, n)
	}
	body := decoder{b: d.b[:n]}
	d.b = d.b[n:]
	if len(body.b) < 1 {
		return errTruncated
	}
	r.Attributes = int8(body.b[0])
	body.b = body.b[1:]
	tsDelta, err := body.varint()
	if err != nil {
		return err
	}
	offDelta, err := body.varint()
	if err != nil {
		return err
	}
	r.Offset = h.BaseOffset + offDelta
	r.Timestamp = h.BaseTimestamp + tsDelta
	if h.LogAppendTime() {
		r.Timestamp = h.MaxTimestamp
	}
	if r.Key, err = body.bytes(); err != nil {
		return err
	}
	if r.Value, err = body.bytes(); err != nil {
		return err
	}
	nh, err := body.varint()
	if err != nil {
		return err
	}
	// Each header takes at least two bytes, which bounds the allocation.
	if nh < 0 || nh > int64(len(body.b)/2) {
		return fmt.Errorf("%w: header count %d", ErrCorrupt, nh)
	}
	if nh > 0 {
		r.Headers = make([]RecordHeader, nh)
		for i := range r.Headers {
			k, err := body.bytes()
			if err != nil {
				return err
			}
			if k == nil {
				return fmt.Errorf("%w: null header key", ErrCorrupt)
			}
			r.Headers[i].Key = string(k)
			if r.Headers[i].Value, err = body.bytes(); err != nil {
				return err
			}
		}
	}
	if len(body.b) != 0 {
		return fmt.Errorf("%w: %d bytes left in record", ErrCorrupt, len(body.b))
	}
	return nil
}

// xerialMagic starts the framing the Java snappy stream (snappy-java) writes:
// the magic, then a version and a minimum compatible version (4 bytes each),
// then blocks of a big-endian uint32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderLen = 16

func decompress(c Codec, src []byte, max int) ([]byte, error) {
	if max < 0 {
		max = 0
	}
	switch c {
	case CodecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
		}
		return readCapped(zr, len(src), max, "gzip")
	case CodecLz4:
		zr := lz4.NewReader(bytes.NewReader(src))
		return readCapped(zr, len(src), max, "lz4")
	case CodecSnappy:
		if len(src) > xerialHeaderLen && bytes.HasPrefix(src, xerialMagic) {
			return unxerial(src[xerialHeaderLen:], max)
		}
		return unsnappy(nil, src, max)
	case CodecZstd:
		return unzstd(src, max)
	}
	return nil, fmt.Errorf("%w %d", ErrUnknownCodec, c)
}

// readCapped reads r to the end into a buffer that grows geometrically but
// never past max+1 bytes, so a decompression bomb costs at most the cap.
func readCapped(r io.Reader, srcLen, max int, name string) ([]byte, error) {
	buf := make([]byte, 0, min(max+1, 4*srcLen+512))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > max {
				return nil, ErrTooLarge
			}
			n := min(max+1, 2*cap(buf))
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > max {
			return nil, ErrTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
		}
	}
}

func unsnappy(dst, src []byte, max int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
	}
	if n > max-len(dst) {
		return nil, ErrTooLarge
	}
	if cap(dst)-len(dst) < n {
		nd := make([]byte, len(dst), len(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	out, err := s2.Decode(dst[len(dst):len(dst)+n], src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
	}
	return dst[:len(dst)+len(out)], nil
}

// unxerial decodes xerial blocks. It sums the claimed block sizes first so
// the cap is enforced before anything is allocated and the output is
// allocated once.
func unxerial(src []byte, max int) ([]byte, error) {
	total := 0
	for rem := src; len(rem) > 0; {
		if len(rem) < 4 {
			return nil, fmt.Errorf("%w: snappy: truncated xerial block", ErrCorrupt)
		}
		sz := int64(binary.BigEndian.Uint32(rem))
		rem = rem[4:]
		if sz > int64(len(rem)) {
			return nil, fmt.Errorf("%w: snappy: xerial block of %d bytes exceeds input", ErrCorrupt, sz)
		}
		n, err := s2.DecodedLen(rem[:sz])
		if err != nil {
			return nil, fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
		}
		total += n
		if total > max {
			return nil, ErrTooLarge
		}
		rem = rem[sz:]
	}
	out := make([]byte, 0, total)
	for len(src) > 0 {
		sz := binary.BigEndian.Uint32(src)
		src = src[4:]
		var err error
		if out, err = unsnappy(out, src[:sz], max); err != nil {
			return nil, err
		}
		src = src[sz:]
	}
	return out, nil
}

// zstd decoders are expensive to build, and their memory bound is fixed at
// construction, so we keep one per distinct cap; in practice the broker uses
// one or two caps.
var (
	zstdMu    sync.Mutex
	zstdByCap = map[int]*zstd.Decoder{}
)

const maxZstdDecoders = 8

func unzstd(src []byte, limit int) ([]byte, error) {
	if limit < 1 {
		limit = 1
	}
	zstdMu.Lock()
	d, ok := zstdByCap[limit]
	if !ok {
		var err error
		d, err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(2),
			zstd.WithDecoderMaxMemory(uint64(limit)),
			zstd.WithDecoderMaxWindow(uint64(min(max(limit, zstd.MinWindowSize), 64<<20))),
		)
		if err != nil {
			zstdMu.Unlock()
			return nil, err
		}
		if len(zstdByCap) < maxZstdDecoders {
			zstdByCap[limit] = d
		} else {
			defer d.Close()
		}
	}
	zstdMu.Unlock()
	out, err := d.DecodeAll(src, nil)
	if err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, ErrTooLarge
		}
		return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	if len(out) > limit {
		return nil, ErrTooLarge
	}
	return out, nil
}
