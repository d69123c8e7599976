package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

var unsafeCgroupName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// CgroupRoot is a cgroup path unique to t (named after the test and this pid) under the
// cgroup2 mount, for a jobs registry to use as its root; it is not created. When t ends,
// also on failure, every process in the tree is killed (cgroup.kill) and the cgroups are
// removed deepest first; one left behind fails t. Without root or a cgroup2 mount the
// test is skipped, or, under CI=true, failed.
func CgroupRoot(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	entries, _ := mountinfo.Read("/proc")
	mount := ""
	for _, e := range entries {
		if e.FSType == "cgroup2" {
			mount = e.MountPoint
		}
	}
	if mount == "" {
		Unavailable(t, "no cgroup2 mount")
	}
	root := filepath.Join(mount, "sandboxd-test-"+unsafeCgroupName.ReplaceAllString(t.Name(), "_")+"-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { removeCgroupTree(t, root) })
	return root
}

// removeCgroupTree kills every process under dir and removes its cgroups, deepest first,
// retrying while the killed processes exit.
func removeCgroupTree(t testing.TB, dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
			os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 100; try++ {
			// by path: a test's own cgroup on cgroup2, which has no symlinks and no
			// renames, so nobody can swap a directory on the way (jobs/safepath.go).
			if err := syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("cleanup: cgroup %s left behind", dir)
	}
}
