package recordbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// EncodeWithOffsets is like Encode but keeps each record's offset: record i
// is written with offset delta recs[i].Offset-o.BaseOffset, and the header
// carries lastOffsetDelta as given rather than len(recs)-1. Offsets must be
// strictly increasing and lie in [o.BaseOffset, o.BaseOffset+lastOffsetDelta].
//
// Log compaction uses it to rewrite a batch that lost some records: the
// batch keeps its base offset, the offsets of the records it still holds
// and its original lastOffsetDelta (so the offset after the batch, and the
// producer's last sequence number, are unchanged). Such a batch is valid
// stored data but not a valid produce payload: Split rejects it because
// lastOffsetDelta != recordsCount-1.
func EncodeWithOffsets(o BatchOptions, recs []Record, lastOffsetDelta int32) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: no records", ErrInvalid)
	}
	prev := int64(-1)
	for _, r := range recs {
		d := r.Offset - o.BaseOffset
		if d <= prev || d > int64(lastOffsetDelta) {
			return nil, fmt.Errorf("%w: record offset %d outside [%d, %d] or out of order", ErrInvalid, r.Offset, o.BaseOffset, o.BaseOffset+int64(lastOffsetDelta))
		}
		prev = d
	}
	baseTs, maxTs := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		maxTs = max(maxTs, r.Timestamp)
	}
	var body []byte
	for _, r := range recs {
		var rec []byte
		rec = append(rec, byte(r.Attributes))
		rec = binary.AppendVarint(rec, r.Timestamp-baseTs)
		rec = binary.AppendVarint(rec, r.Offset-o.BaseOffset)
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
	be.PutUint32(b[offLastOffsetDelta:], uint32(lastOffsetDelta))
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
