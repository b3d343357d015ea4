//go:build race

package storage

// raceEnabled shrinks the heaviest randomized tests under the race
// detector, which slows decompression by orders of magnitude.
const raceEnabled = true
