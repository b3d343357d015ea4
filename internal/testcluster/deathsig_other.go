//go:build !linux

package testcluster

import "os/exec"

// dieWithParent is Linux-only; elsewhere a broker may outlive a test
// binary that panics.
func dieWithParent(*exec.Cmd) {}
