package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// SmallVolume mounts a tmpfs of size bytes for the test and returns its
// path, unmounted at cleanup: a real filesystem that really fills up, for
// the disk-full tests. Mounting needs root, or sudo without a password
// (what .ci/run uses to install packages); without either the test fails
// saying so.
func SmallVolume(t Harness, size int64) string {
	t.Helper()
	dir := t.TempDir()
	var pre []string
	if os.Geteuid() != 0 {
		if err := exec.Command("sudo", "-n", "true").Run(); err != nil {
			t.Fatalf("testcluster: mounting a tmpfs needs root or passwordless sudo: %v", err)
		}
		pre = []string{"sudo", "-n"}
	}
	run := func(args ...string) error {
		args = append(pre, args...)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0777", size), "tmpfs", dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run("umount", "-l", dir); err != nil {
			t.Logf("testcluster: %v", err)
		}
	})
	return dir
}
