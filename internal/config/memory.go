package config

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// memoryLimit is the memory this process may use: the cgroup v2 limit
// when one is set, else the machine's total; 4 GiB when neither can be
// read. Defaults that must fit the machine derive from it.
func memoryLimit() int64 {
	total := int64(4 << 30)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kb, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64); err == nil && n > 0 {
					total = n << 10
				}
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 && n < total {
			total = n
		}
	}
	return total
}
