package coordinator

import "testing"

// The expected partitions are Kafka's: abs(String.hashCode()) % n, with
// the hash codes Java gives these strings.
func TestPartitionFor(t *testing.T) {
	for _, tc := range []struct {
		key  string
		n    int
		want int32
	}{
		{"", 50, 0},
		{"a", 50, 97 % 50},            // "a".hashCode() == 97
		{"hello", 50, 99162322 % 50},  // 99162322
		{"polygenelubricants", 50, 0}, // Integer.MIN_VALUE: Kafka's abs gives 0
		{"Aa", 7, 2112 % 7},           // 2112, as "BB"
		{"BB", 7, 2112 % 7},           //
		{"héllo", 50, 103094734 % 50}, // a non-ASCII code unit
		{"😀", 50, 1772899 % 50},       // a surrogate pair: two code units
		{"anything", 1, 0},
		{"anything", 0, 0},
	} {
		if got := PartitionFor(tc.key, tc.n); got != tc.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", tc.key, tc.n, got, tc.want)
		}
	}
}

// PartitionFor allocates nothing: cluster mode calls it for every
// coordinator request.
func TestPartitionForAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { PartitionFor("a-group-😀-id", 50) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}
