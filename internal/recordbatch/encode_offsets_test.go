package recordbatch

import (
	"errors"
	"testing"
)

func TestEncodeWithOffsets(t *testing.T) {
	recs := []Record{{Offset: 101, Timestamp: 7, Key: []byte("a")}, {Offset: 104, Timestamp: 5, Key: []byte("b"), Value: []byte("v")}}
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		o := BatchOptions{BaseOffset: 100, LeaderEpoch: 3, Codec: c, ProducerID: 8, ProducerEpoch: 2, BaseSequence: 40}
		b, err := EncodeWithOffsets(o, recs, 6)
		if err != nil {
			t.Fatal(err)
		}
		h, err := Check(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset != 100 || h.LastOffsetDelta != 6 || h.RecordsCount != 2 || h.MaxTimestamp != 7 || h.Codec() != c ||
			h.ProducerID != 8 || h.ProducerEpoch != 2 || h.BaseSequence != 40 || h.PartitionLeaderEpoch != 3 {
			t.Fatalf("header %+v", h)
		}
		got, err := Records(b, 1<<20)
		if err != nil || len(got) != 2 || got[0].Offset != 101 || got[1].Offset != 104 || got[0].Value != nil || string(got[1].Value) != "v" || got[1].Timestamp != 5 {
			t.Fatalf("records %+v %v", got, err)
		}
		// A compacted batch is stored data, not a produce payload.
		if _, err := Split(b); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Split accepted a batch with gaps: %v", err)
		}
	}
	for _, bad := range [][]Record{nil, {{Offset: 99}}, {{Offset: 107}}, {{Offset: 102}, {Offset: 102}}} {
		if _, err := EncodeWithOffsets(BatchOptions{BaseOffset: 100}, bad, 6); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}
