package recordbatch

import (
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// Every range of a summed buffer long enough to use the sums gets the
// CRC-32C of its bytes, whatever its alignment, however the buffer
// arrived.
func TestSumsChecksumIsTheCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		buf := make([]byte, 5*SumChunk+rng.IntN(3*SumChunk))
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		var s Sums
		s.Reset(buf)
		for filled := 0; filled < len(buf); {
			filled = min(len(buf), filled+1+rng.IntN(3*SumChunk))
			s.Fill(filled)
		}
		for range 300 {
			start := rng.IntN(len(buf) - 2*SumChunk)
			end := start + 2*SumChunk + rng.IntN(len(buf)-start-2*SumChunk+1)
			got, ok := s.Checksum(buf[start:end])
			if !ok {
				t.Fatalf("round %d: [%d, %d) of a filled %d-byte buffer declined", round, start, end, len(buf))
			}
			if want := crc32.Checksum(buf[start:end], castagnoli); got != want {
				t.Fatalf("round %d: [%d, %d): %08x, want %08x", round, start, end, got, want)
			}
		}
		// Aligned on chunks at either end, and the whole buffer.
		for _, r := range [][2]int{{0, 2 * SumChunk}, {SumChunk, 4 * SumChunk}, {0, len(buf)}, {SumChunk, len(buf)}} {
			got, ok := s.Checksum(buf[r[0]:r[1]])
			if want := crc32.Checksum(buf[r[0]:r[1]], castagnoli); !ok || got != want {
				t.Fatalf("round %d: %v: %08x %v, want %08x", round, r, got, ok, want)
			}
		}
	}
}

// Sums answer only for bytes of their own buffer that have arrived.
func TestSumsDecline(t *testing.T) {
	buf := make([]byte, 8*SumChunk)
	other := make([]byte, 8*SumChunk)
	var s Sums
	s.Reset(buf)
	s.Fill(4 * SumChunk)
	for name, b := range map[string][]byte{
		"another buffer":            other[:3*SumChunk],
		"short":                     buf[:2*SumChunk-1],
		"beyond what arrived":       buf[2*SumChunk : 6*SumChunk],
		"straddling the end":        buf[7*SumChunk:],
		"before the buffer's start": other[len(other)-3*SumChunk:],
	} {
		if _, ok := s.Checksum(b); ok {
			t.Errorf("%s: answered", name)
		}
	}
	if _, ok := s.Checksum(buf[:3*SumChunk]); !ok {
		t.Fatal("arrived bytes declined")
	}
	s.Reset(nil)
	if _, ok := s.Checksum(buf[:3*SumChunk]); ok {
		t.Error("answered after Reset(nil)")
	}
	var none *Sums
	if _, ok := none.Checksum(buf[:3*SumChunk]); ok {
		t.Error("a nil Sums answered")
	}
}

// A produce payload of large batches splits as Split does: good batches
// pass, a batch corrupted on the way in is refused, and sums that
// disagree with a good batch (a bug in them) cost a recomputation, not
// the batch.
func TestSplitSummed(t *testing.T) {
	var payload []byte
	for i := range 3 {
		recs := make([]Record, 40)
		for j := range recs {
			recs[j].Value = make([]byte, 1000+i)
			for k := range recs[j].Value {
				recs[j].Value[k] = byte(i*7 + j*13 + k)
			}
		}
		b, err := Encode(BatchOptions{ProducerID: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		payload = append(payload, b...)
	}
	// Inside a larger frame, as a produce request's records are.
	frame := append(make([]byte, 333), payload...)
	payload = frame[333:]
	summed := func() *Sums {
		var s Sums
		s.Reset(frame)
		s.Fill(len(frame))
		return &s
	}

	batches, err := SplitSummed(payload, summed())
	if err != nil || len(batches) != 3 {
		t.Fatalf("good payload: %d batches, %v", len(batches), err)
	}
	s := summed()
	if _, ok := s.Checksum(batches[1][offAttributes:]); !ok {
		t.Fatal("the test's batches are too small to be checked from sums")
	}

	s.sums[3] ^= 1
	if _, err := SplitSummed(payload, s); err != nil {
		t.Fatalf("wrong sums refused a good payload: %v", err)
	}

	// Corrupted before it arrived: the sums see the corrupt bytes.
	frame[333+len(batches[0])+len(batches[1])/2] ^= 0x40
	if _, err := SplitSummed(payload, summed()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt batch: %v, want ErrCorrupt", err)
	}
}

func BenchmarkSplitSummed(b *testing.B) {
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i].Value = make([]byte, 1024)
	}
	batch, err := Encode(BatchOptions{ProducerID: -1}, recs)
	if err != nil {
		b.Fatal(err)
	}
	var s Sums
	s.Reset(batch)
	s.Fill(len(batch))
	b.SetBytes(int64(len(batch)))
	for _, sums := range []*Sums{nil, &s} {
		name := "direct"
		if sums != nil {
			name = "summed"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := SplitSummed(batch, sums); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
