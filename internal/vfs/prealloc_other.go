//go:build !linux

package vfs

// writeAt is never reached: without Preallocate the file always appends.
func (f *osFile) writeAt(p []byte, off int64) (int, error) { return f.File.WriteAt(p, off) }
