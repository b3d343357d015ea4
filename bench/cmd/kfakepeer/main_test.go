package main

import (
	"encoding/binary"
	"testing"
)

// batch returns a record batch's bytes of the given total size whose
// header says it holds records records (only the fields countRecords
// reads are set).
func batch(size int, records uint32) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[8:12], uint32(size-12))
	binary.BigEndian.PutUint32(b[57:61], records)
	return b
}

func TestCountRecords(t *testing.T) {
	two := append(batch(100, 3), batch(70, 5)...)
	if got := countRecords(two); got != 8 {
		t.Fatalf("two batches: %d records, want 8", got)
	}
	if got := countRecords(two[:150]); got != 3 {
		t.Fatalf("second batch cut short: %d records, want 3", got)
	}
	bad := batch(100, 9)
	binary.BigEndian.PutUint32(bad[8:12], 10) // shorter than a header
	if got := countRecords(bad); got != 0 {
		t.Fatalf("length below a header: %d records, want 0", got)
	}
	if got := countRecords(nil); got != 0 {
		t.Fatalf("no batches: %d", got)
	}
}
