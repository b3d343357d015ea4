package recordbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// BatchOptions are the producer-chosen header fields for Encode.
type BatchOptions struct {
	BaseOffset    int64
	LeaderEpoch   int32
	Codec         Codec
	LogAppendTime bool
	Transactional bool
	Control       bool
	ProducerID    int64 // -1 when not idempotent
	ProducerEpoch int16
	BaseSequence  int32
	// RawSnappy selects unframed snappy instead of the xerial framing the
	// Java client writes.
	RawSnappy bool
}

// Encode builds a v2 batch holding recs, numbered consecutively from
// BaseOffset (Record.Offset is ignored). The broker never re-encodes stored
// batches; Encode exists for tests (here and in other packages) and for
// batches the broker itself originates.
func Encode(o BatchOptions, recs []Record) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: no records", ErrInvalid)
	}
	baseTs, maxTs := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		maxTs = max(maxTs, r.Timestamp)
	}
	var body []byte
	for i, r := range recs {
		var rec []byte
		rec = append(rec, byte(r.Attributes))
		rec = binary.AppendVarint(rec, r.Timestamp-baseTs)
		rec = binary.AppendVarint(rec, int64(i))
		rec = appendBytes(rec, r.Key)
		rec = appendBytes(rec, r.Value)
		rec = binary.AppendVarint(rec, int64(len(r.Headers)))
		for _, h := range r.Headers {
			rec = appendBytes(rec, []byte(h.Key))
			rec = appendBytes(rec, h.Value)
		}
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	body, err := compress(o, body)
	if err != nil {
		return nil, err
	}
	attrs := int16(o.Codec) & CodecMask
	if o.LogAppendTime {
		attrs |= TimestampTypeBit
	}
	if o.Transactional {
		attrs |= TransactionalBit
	}
	if o.Control {
		attrs |= ControlBit
	}
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	be.PutUint64(b[offBaseOffset:], uint64(o.BaseOffset))
	be.PutUint32(b[offBatchLength:], uint32(HeaderSize-LengthOverhead+len(body)))
	be.PutUint32(b[offLeaderEpoch:], uint32(o.LeaderEpoch))
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(attrs))
	be.PutUint32(b[offLastOffsetDelta:], uint32(len(recs)-1))
	be.PutUint64(b[offBaseTimestamp:], uint64(baseTs))
	be.PutUint64(b[offMaxTimestamp:], uint64(maxTs))
	be.PutUint64(b[offProducerID:], uint64(o.ProducerID))
	be.PutUint16(b[offProducerEpoch:], uint16(o.ProducerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(o.BaseSequence))
	be.PutUint32(b[offRecordsCount:], uint32(len(recs)))
	b = append(b, body...)
	be.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b, nil
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

func compress(o BatchOptions, in []byte) ([]byte, error) {
	var buf bytes.Buffer
	switch o.Codec {
	case CodecNone:
		return in, nil
	case CodecGzip:
		w := gzip.NewWriter(&buf)
		w.Write(in)
		if err := w.Close(); err != nil {
			return nil, err
		}
	case CodecLz4:
		w := lz4.NewWriter(&buf)
		w.Write(in)
		if err := w.Close(); err != nil {
			return nil, err
		}
	case CodecZstd:
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		w.Write(in)
		if err := w.Close(); err != nil {
			return nil, err
		}
	case CodecSnappy:
		if o.RawSnappy {
			return s2.EncodeSnappy(nil, in), nil
		}
		out := append([]byte{}, xerialMagic...)
		out = be.AppendUint32(out, 1)
		out = be.AppendUint32(out, 1)
		// Small blocks exercise the multi-block path in tests.
		const block = 32 << 10
		for len(in) > 0 {
			n := min(block, len(in))
			enc := s2.EncodeSnappy(nil, in[:n])
			out = be.AppendUint32(out, uint32(len(enc)))
			out = append(out, enc...)
			in = in[n:]
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w %d", ErrUnknownCodec, o.Codec)
	}
	return buf.Bytes(), nil
}
