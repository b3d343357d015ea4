//go:build !unix

package broker

func openFileLimit() (uint64, bool) { return 0, false }
