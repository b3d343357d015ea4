package recordbatch

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
)

func sampleRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Timestamp: 1000 + int64(i*7%5),
			Key:       []byte(fmt.Sprintf("k%d", i)),
			Value:     bytes.Repeat([]byte{byte(i)}, i*10),
		}
		if i%3 == 0 {
			recs[i].Key = nil
			recs[i].Headers = []RecordHeader{{Key: "h", Value: []byte("v")}, {Key: "n"}}
		}
	}
	return recs
}

func TestRoundTripAllCodecs(t *testing.T) {
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		for _, raw := range []bool{false, true} {
			want := sampleRecords(50)
			b, err := Encode(BatchOptions{Codec: c, ProducerID: -1, RawSnappy: raw}, want)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := Split(append(append([]byte{}, b...), b...))
			if err != nil || len(batches) != 2 {
				t.Fatalf("codec %d: split: %v %d", c, err, len(batches))
			}
			SetBaseOffset(batches[1], 100)
			SetPartitionLeaderEpoch(batches[1], 7)
			h, err := Check(batches[1])
			if err != nil || h.BaseOffset != 100 || h.PartitionLeaderEpoch != 7 || h.Codec() != c || h.LastOffset() != 149 {
				t.Fatalf("codec %d: header %+v %v", c, h, err)
			}
			got, err := Records(batches[1], 1<<20)
			if err != nil {
				t.Fatalf("codec %d: %v", c, err)
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.Offset != 100+int64(i) || g.Timestamp != w.Timestamp || !bytes.Equal(g.Key, w.Key) ||
					(g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
					t.Fatalf("codec %d record %d: got %+v want %+v", c, i, g, w)
				}
				if len(w.Headers) > 0 && (g.Headers[1].Value != nil || string(g.Headers[0].Value) != "v") {
					t.Fatalf("headers %+v", g.Headers)
				}
			}
			if c != CodecNone {
				if _, err := Records(batches[1], 100); !errors.Is(err, ErrTooLarge) {
					t.Fatalf("codec %d: cap not enforced: %v", c, err)
				}
			}
		}
	}
}

func TestSplitErrors(t *testing.T) {
	good, _ := Encode(BatchOptions{ProducerID: -1}, sampleRecords(3))
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrInvalid},
		{"short", good[:10], ErrCorrupt},
		{"truncated", good[:len(good)-1], ErrCorrupt},
		{"magic1", mod(func(b []byte) []byte { b[16] = 1; return b }), ErrUnsupportedMagic},
		{"magic0 short", mod(func(b []byte) []byte { b[16] = 0; return b[:30] }), ErrUnsupportedMagic},
		{"crc", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorrupt},
		{"negative length", mod(func(b []byte) []byte { be.PutUint32(b[8:], 0xffffffff); return b }), ErrCorrupt},
		{"trailing", append(append([]byte{}, good...), 1, 2, 3), ErrCorrupt},
		{"lastOffsetDelta", mod(func(b []byte) []byte {
			be.PutUint32(b[offLastOffsetDelta:], 5)
			be.PutUint32(b[offCRC:], crc(b))
			return b
		}), ErrInvalid},
		{"count too big", mod(func(b []byte) []byte {
			be.PutUint32(b[offLastOffsetDelta:], 999)
			be.PutUint32(b[offRecordsCount:], 1000)
			be.PutUint32(b[offCRC:], crc(b))
			return b
		}), ErrInvalid},
	}
	for _, c := range cases {
		if _, err := Split(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
}

func crc(b []byte) uint32 {
	return crcOf(b[offAttributes:])
}

func TestRecordsCountLie(t *testing.T) {
	b, _ := Encode(BatchOptions{Codec: CodecZstd}, sampleRecords(2))
	be.PutUint32(b[offRecordsCount:], 1<<30)
	if _, err := Records(b, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v", err)
	}
}

// allocCheck runs f and fails if it allocated more than limit bytes.
func allocCheck(t testing.TB, limit uint64, f func()) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	if d := m1.TotalAlloc - m0.TotalAlloc; d > limit {
		t.Fatalf("allocated %d bytes, limit %d", d, limit)
	}
}

func seeds() [][]byte {
	var out [][]byte
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		b, _ := Encode(BatchOptions{Codec: c}, sampleRecords(4))
		out = append(out, b)
	}
	// A compression bomb: a megabyte of zeros compresses to almost nothing.
	big := []Record{{Value: make([]byte, 1<<20)}}
	for _, c := range []Codec{CodecGzip, CodecZstd, CodecLz4, CodecSnappy} {
		b, _ := Encode(BatchOptions{Codec: c}, big)
		out = append(out, b)
	}
	return out
}

const fuzzCap = 64 << 10

func FuzzSplit(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		allocCheck(t, uint64(4*len(b))+64<<10, func() {
			batches, err := Split(b)
			if err != nil {
				return
			}
			total := 0
			for _, bt := range batches {
				total += len(bt)
			}
			if total != len(b) {
				t.Fatalf("batches cover %d of %d bytes", total, len(b))
			}
		})
	})
}

func FuzzRecords(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Decoders keep internal state (lz4 block buffers up to 4 MiB, zstd
		// windows); the bound is generous but still far below an
		// unbounded allocation driven by the input's claims.
		allocCheck(t, uint64(64*len(b))+3*fuzzCap+16<<20, func() {
			recs, err := Records(b, fuzzCap)
			if err != nil {
				return
			}
			if len(recs) > len(b)+fuzzCap {
				t.Fatalf("%d records from %d bytes", len(recs), len(b))
			}
		})
	})
}
