package recordbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"

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
// BaseOffset (Record.Offset is ignored). Stored batches are never
// re-encoded on the produce or fetch path; Encode serves tests (here and in
// other packages) and batches the broker itself originates (internal
// topics, transaction markers).
func Encode(o BatchOptions, recs []Record) ([]byte, error) {
	numbered := make([]Record, len(recs))
	for i, r := range recs {
		r.Offset = o.BaseOffset + int64(i)
		numbered[i] = r
	}
	return EncodeWithOffsets(o, numbered, int32(len(recs)-1))
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
