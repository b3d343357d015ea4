// Package benchutil holds what the benchmark commands (flowbench, habench)
// share about the machine and the tree: free ports, CPU time and disk use
// of processes, build steps and finding the module they run from. It
// starts nothing and keeps no state.
package benchutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// CPUSeconds is the user+system CPU time of pid so far (all threads), from
// /proc/<pid>/stat; 0 when the process is gone.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// Fields after the name start at field 3 (state): utime is field 14,
	// stime 15.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// DirBytes is the size of the regular files under dir.
func DirBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Run runs a build step in dir, its output shown only when it fails.
func Run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return nil
}

// FindModule walks up from the working directory to the directory whose
// go.mod declares module; cmd names the command in the error.
func FindModule(module, cmd string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if ModulePath(filepath.Join(dir, "go.mod")) == module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no directory above the working directory has the go.mod of %s (run %s from stoatflow/bench)", module, cmd)
		}
		dir = parent
	}
}

// ModulePath is the module path the go.mod at path declares ("" if none).
func ModulePath(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "module" {
			return strings.Trim(fs[1], "\"`")
		}
	}
	return ""
}
