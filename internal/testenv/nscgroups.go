package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CgroupDir is a test's own sub-cgroup in one hierarchy (for systemd as PID 1 of a
// namespace: the systemd tests and the Debian package tests).
type CgroupDir struct {
	Mountpoint string // where the hierarchy is mounted, e.g. /sys/fs/cgroup/systemd
	Dir        string // the sub-cgroup's directory on the host
}

// MakeCgroups creates name under the test's cgroup in every hierarchy mounted below
// /sys/fs/cgroup, so the private systemd's cgroups stay a subtree of ours.
func MakeCgroups(t *testing.T, name string) []CgroupDir {
	t.Helper()
	type mnt struct {
		point, root, fstype string
		opts                []string
	}
	var mounts []mnt
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		if !strings.HasPrefix(f[4], "/sys/fs/cgroup") {
			continue
		}
		mounts = append(mounts, mnt{point: f[4], root: f[3], fstype: g[0], opts: strings.Split(g[2], ",")})
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []CgroupDir
	t.Cleanup(func() { RemoveCgroups(t, out) })
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		i := slices.IndexFunc(mounts, func(m mnt) bool {
			if ctrls == "" {
				return m.fstype == "cgroup2"
			}
			return m.fstype == "cgroup" && !slices.ContainsFunc(strings.Split(ctrls, ","), func(c string) bool { return !slices.Contains(m.opts, c) })
		})
		if i < 0 {
			continue // hierarchy not mounted: nothing to confine
		}
		m := mounts[i]
		rel, err := filepath.Rel(m.root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		parent := filepath.Join(m.point, rel)
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create cgroup %s: %v", dir, err)
		}
		out = append(out, CgroupDir{Mountpoint: m.point, Dir: dir})
		if slices.Contains(m.opts, "cpuset") {
			// A v1 cpuset cgroup starts with no cpus and mems, and takes no process.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
				}
				if err != nil {
					t.Fatalf("cpuset %s: %v", f, err)
				}
			}
		}
	}
	return out
}

// RemoveCgroups removes the test's sub-cgroups, children first, once their processes
// are gone (the kernel takes a moment to empty them after PID 1 is killed).
func RemoveCgroups(t *testing.T, cgroups []CgroupDir) {
	for _, c := range cgroups {
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := rmdirCgroupTree(c.Dir)
			if err == nil || os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", c.Dir, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// rmdirCgroupTree rmdirs a cgroup directory and its child cgroups (cgroupfs files cannot be
// unlinked; rmdir of an empty cgroup removes them).
func rmdirCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirCgroupTree(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	// by path: a test's own cgroup, which has no symlinks and no renames.
	return syscall.Rmdir(dir)
}
