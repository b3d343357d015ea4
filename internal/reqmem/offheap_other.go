//go:build !unix

package reqmem

import "errors"

const canMap = false

func mapBuffer(int) ([]byte, error) { return nil, errors.New("no anonymous mappings here") }

func unmapBuffer([]byte) {}
