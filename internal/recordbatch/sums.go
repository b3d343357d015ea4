package recordbatch

import (
	"hash/crc32"
	"sync"
	"unsafe"
)

// Checking a batch's CRC-32C reads all of its bytes. In a produce frame of
// megabytes those bytes have long left the CPU's caches by the time the
// frame is parsed, so the check runs at memory speed (a quarter of what
// the same instruction does on cached bytes: 6 against 24 GB/s here) and
// was the broker's largest user-space cost under pipelined produce. Sums
// moves that work to the moment the bytes arrive: the connection reader
// sums each chunk of the frame right after the socket copied it in, while
// it is still cached, and a batch is checked later by combining the sums
// of the chunks it covers, reading only its unaligned head and tail.
//
// Combining works because a CRC register is linear over GF(2): running
// register R over bytes A then B gives shift(R, |B|) xor run(0, B), where
// shift(R, n) is R run over n zero bytes. Every chunk has the same length,
// so one shift, precomputed as four byte-indexed tables, serves them all.

// SumChunk is the length of the chunks Sums keeps a sum for.
const SumChunk = 4 << 10

// Sums holds the CRC-32C register of each SumChunk-long chunk of one
// buffer, started from zero, for the chunks that have arrived. The zero
// value sums nothing, and Checksum then always declines.
type Sums struct {
	buf  []byte
	sums []uint32
}

// Reset starts summing buf, whose bytes will arrive in order (Fill);
// Reset(nil) drops the buffer, after which Checksum declines.
func (s *Sums) Reset(buf []byte) {
	s.buf = buf
	s.sums = s.sums[:0]
}

// Fill records that buf[:n] has arrived and sums every chunk that is now
// complete.
func (s *Sums) Fill(n int) {
	n = min(n, len(s.buf))
	for k := len(s.sums); (k+1)*SumChunk <= n; k++ {
		s.sums = append(s.sums, run(0, s.buf[k*SumChunk:(k+1)*SumChunk]))
	}
}

// Checksum returns the CRC-32C of b, which must lie inside the buffer
// being summed, from the chunk sums. A nil Sums declines. ok is false when b does not lie in
// the buffer, or covers too few whole chunks for the sums to save work;
// the caller then computes the checksum itself.
func (s *Sums) Checksum(b []byte) (crc uint32, ok bool) {
	if s == nil || len(b) < 2*SumChunk || len(s.buf) == 0 {
		return 0, false
	}
	// Where b starts in the buffer: decoded fields are slices of the
	// frame they were decoded from, and anything else is declined.
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.buf)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if at < base || at-base > uintptr(len(s.buf)) || uintptr(len(b)) > uintptr(len(s.buf))-(at-base) {
		return 0, false
	}
	start := int(at - base)
	end := start + len(b)
	first := (start + SumChunk - 1) / SumChunk // first whole chunk
	last := end / SumChunk                     // one past the last
	if last > len(s.sums) || last-first < 1 {
		return 0, false
	}
	sh := chunkShift()
	r := run(^uint32(0), s.buf[start:first*SumChunk])
	for _, c := range s.sums[first:last] {
		r = sh.apply(r) ^ c
	}
	r = run(r, s.buf[last*SumChunk:end])
	return ^r, true
}

// run runs the CRC-32C register r over p. (crc32.Update takes and returns
// the register inverted.)
func run(r uint32, p []byte) uint32 {
	return ^crc32.Update(^r, castagnoli, p)
}

// shift multiplies a register by x^(8*SumChunk) modulo the CRC-32C
// polynomial: the register run over SumChunk zero bytes.
type shift [4][256]uint32

func (t *shift) apply(r uint32) uint32 {
	return t[0][r&0xff] ^ t[1][r>>8&0xff] ^ t[2][r>>16&0xff] ^ t[3][r>>24]
}

var chunkShift = sync.OnceValue(func() *shift {
	zeros := make([]byte, SumChunk)
	var basis [32]uint32
	for i := range basis {
		basis[i] = run(1<<i, zeros)
	}
	t := new(shift)
	for i := range t {
		for v := range 256 {
			for j := range 8 {
				if v&(1<<j) != 0 {
					t[i][v] ^= basis[8*i+j]
				}
			}
		}
	}
	return t
})
