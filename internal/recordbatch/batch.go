// Package recordbatch owns the Kafka record-batch (magic v2) wire format:
// validating and splitting produce payloads, rewriting the two header fields
// the broker assigns (base offset and partition leader epoch), and decoding
// records, including decompression under a hard size cap.
//
// It works on raw bytes and never re-encodes a batch the broker stores. It
// must not import other MoonMQ packages or do any I/O.
package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// HeaderSize is the size of a v2 batch header; records follow it.
const HeaderSize = 61

// Offsets of header fields.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordsCount    = 57
)

// LengthOverhead is the number of bytes before and including the batchLength
// field, which batchLength does not count.
const LengthOverhead = 12

// Attribute bits.
const (
	CodecMask         = 0x07
	TimestampTypeBit  = 0x08
	TransactionalBit  = 0x10
	ControlBit        = 0x20
	minBatchLength    = HeaderSize - LengthOverhead
	minRecordEncoding = 7 // length, attributes, ts delta, offset delta, key len, value len, header count
)

// Codec is a compression codec from the batch attributes.
type Codec int8

// Codecs defined by Kafka.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLz4    Codec = 3
	CodecZstd   Codec = 4
)

// Errors. Callers map ErrCorrupt to CORRUPT_MESSAGE, ErrInvalid to
// INVALID_RECORD and ErrUnsupportedMagic to UNSUPPORTED_VERSION (or similar).
var (
	ErrCorrupt          = errors.New("recordbatch: corrupt batch")
	ErrInvalid          = errors.New("recordbatch: invalid batch")
	ErrUnsupportedMagic = errors.New("recordbatch: unsupported magic (only v2 record batches are accepted)")
	ErrTooLarge         = errors.New("recordbatch: decompressed size exceeds limit")
	ErrUnknownCodec     = errors.New("recordbatch: unknown compression codec")
)

// Header is a decoded v2 batch header.
type Header struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordsCount         int32
}

// Codec returns the compression codec.
func (h Header) Codec() Codec { return Codec(h.Attributes & CodecMask) }

// LogAppendTime reports whether the timestamps are broker-assigned.
func (h Header) LogAppendTime() bool { return h.Attributes&TimestampTypeBit != 0 }

// Transactional reports whether the batch is part of a transaction.
func (h Header) Transactional() bool { return h.Attributes&TransactionalBit != 0 }

// Control reports whether the batch holds control records.
func (h Header) Control() bool { return h.Attributes&ControlBit != 0 }

// LastOffset is the offset of the last record the batch covers.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the number of bytes the whole batch occupies.
func (h Header) Size() int { return LengthOverhead + int(h.BatchLength) }

var be = binary.BigEndian

// ParseHeader decodes the header at the start of b. It checks only that b
// holds a whole header with magic 2; it does not check the CRC or that b
// holds the whole batch.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < offMagic+1 {
		return h, fmt.Errorf("%w: %d bytes is shorter than a batch header", ErrCorrupt, len(b))
	}
	h.Magic = int8(b[offMagic])
	if h.Magic != 2 {
		return h, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, h.Magic)
	}
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes is shorter than a batch header", ErrCorrupt, len(b))
	}
	h.BaseOffset = int64(be.Uint64(b[offBaseOffset:]))
	h.BatchLength = int32(be.Uint32(b[offBatchLength:]))
	h.PartitionLeaderEpoch = int32(be.Uint32(b[offLeaderEpoch:]))
	h.CRC = be.Uint32(b[offCRC:])
	h.Attributes = int16(be.Uint16(b[offAttributes:]))
	h.LastOffsetDelta = int32(be.Uint32(b[offLastOffsetDelta:]))
	h.BaseTimestamp = int64(be.Uint64(b[offBaseTimestamp:]))
	h.MaxTimestamp = int64(be.Uint64(b[offMaxTimestamp:]))
	h.ProducerID = int64(be.Uint64(b[offProducerID:]))
	h.ProducerEpoch = int16(be.Uint16(b[offProducerEpoch:]))
	h.BaseSequence = int32(be.Uint32(b[offBaseSequence:]))
	h.RecordsCount = int32(be.Uint32(b[offRecordsCount:]))
	if h.BatchLength < minBatchLength {
		return h, fmt.Errorf("%w: batch length %d", ErrCorrupt, h.BatchLength)
	}
	return h, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Check validates that b is exactly one whole batch with a correct length,
// magic and CRC, and returns its header. It makes no semantic checks, so it
// suits batches already in a log (which may come from replication).
func Check(b []byte) (Header, error) { return check(b, nil) }

// check is Check, taking the CRC from sums when they cover b.
func check(b []byte, sums *Sums) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.Size() != len(b) {
		return h, fmt.Errorf("%w: batch length %d does not match %d bytes", ErrCorrupt, h.BatchLength, len(b)-LengthOverhead)
	}
	if got, ok := sums.Checksum(b[offAttributes:]); ok && got == h.CRC {
		return h, nil
	}
	// Without sums, or when they disagree: a batch is refused only on
	// the checksum of its own bytes.
	if got := crc32.Checksum(b[offAttributes:], castagnoli); got != h.CRC {
		return h, fmt.Errorf("%w: crc %08x, computed %08x", ErrCorrupt, h.CRC, got)
	}
	return h, nil
}

// Split splits a produce payload of concatenated batches into its batches
// (subslices of b) and validates each: framing, magic, CRC, and the
// producer-side invariants that every batch holds at least one record and
// that lastOffsetDelta == recordsCount-1.
func Split(b []byte) ([][]byte, error) { return SplitSummed(b, nil) }

// SplitSummed is Split for a payload inside the buffer sums sums: a large
// batch's CRC comes from the sums of the chunks it covers.
func SplitSummed(b []byte, sums *Sums) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < LengthOverhead {
			return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(b))
		}
		n := int64(int32(be.Uint32(b[offBatchLength:])))
		if n < 0 || n > int64(len(b)-LengthOverhead) {
			// Report an old-format message as such even when it is
			// truncated, since that is the more useful error.
			if len(b) > offMagic && b[offMagic] != 2 {
				return nil, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, int8(b[offMagic]))
			}
			return nil, fmt.Errorf("%w: batch length %d exceeds the %d bytes left", ErrCorrupt, n, len(b)-LengthOverhead)
		}
		batch := b[:LengthOverhead+n]
		h, err := check(batch, sums)
		if err != nil {
			return nil, err
		}
		// Kafka rejects empty producer batches: an empty batch would still
		// claim an offset, and nothing legitimate produces one.
		if h.RecordsCount <= 0 {
			return nil, fmt.Errorf("%w: records count %d", ErrInvalid, h.RecordsCount)
		}
		if h.LastOffsetDelta != h.RecordsCount-1 {
			return nil, fmt.Errorf("%w: lastOffsetDelta %d with %d records", ErrInvalid, h.LastOffsetDelta, h.RecordsCount)
		}
		if int64(h.RecordsCount) > (n-minBatchLength)/minRecordEncoding && h.Codec() == CodecNone {
			return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrInvalid, h.RecordsCount, n-minBatchLength)
		}
		out = append(out, batch)
		b = b[LengthOverhead+n:]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no batches", ErrInvalid)
	}
	return out, nil
}

// SetBaseOffset rewrites the base offset of the batch at the start of b in
// place. The field is outside the CRC, so the batch stays valid.
func SetBaseOffset(b []byte, off int64) { be.PutUint64(b[offBaseOffset:], uint64(off)) }

// SetPartitionLeaderEpoch rewrites the partition leader epoch in place; like
// the base offset it is outside the CRC.
func SetPartitionLeaderEpoch(b []byte, e int32) { be.PutUint32(b[offLeaderEpoch:], uint32(e)) }

// BaseOffset reads the base offset of the batch at the start of b, which
// must hold at least 8 bytes.
func BaseOffset(b []byte) int64 { return int64(be.Uint64(b)) }

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
