//go:build !linux

package diskhealth

func statfs(string) (free, total int64, err error) { return 0, 0, errUnsupported }
