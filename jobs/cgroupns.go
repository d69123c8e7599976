package jobs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// A daemon in a cgroup namespace of its own (a pod's container) that sees the node's whole
// cgroup2 hierarchy (a hostPath of /sys/fs/cgroup) and keeps its jobs outside its pod
// ([jobs] cgroup_root, docs/operations.md) reads /proc/PID/cgroup relative to its
// namespace's root: a job's cgroup reads "/../../sandboxd-jobs/jobs/ID". Compared with
// paths below the mount, such a job was never in its own cgroup: SIGTERM reached none of
// its processes (only the SIGKILL after the grace, through cgroup.kill), and every one of
// them would be an escaped process (issue 25, found by TestJobsRootOutsideThePod). The
// namespace's root is found once in the mount, and such paths are mapped below the mount.

// nsRoots caches, per procfs, the cgroup namespace root's path below the cgroup2 mount.
var nsRoots sync.Map // procRoot -> nsRoot

type nsRoot struct {
	path string
	err  error
}

// belowMount maps p, a cgroup path as <procRoot>/PID/cgroup names it, to the path below
// the cgroup2 mount. Only a path that climbs out of the namespace ("/..") needs it.
func belowMount(procRoot, p string) (string, error) {
	if p != "/.." && !strings.HasPrefix(p, "/../") {
		return p, nil
	}
	v, ok := nsRoots.Load(procRoot)
	if !ok {
		r, err := findNSRoot(procRoot)
		v, _ = nsRoots.LoadOrStore(procRoot, nsRoot{path: r, err: err})
	}
	root := v.(nsRoot)
	if root.err != nil {
		return "", root.err
	}
	return path.Join(root.path, p), nil
}

// findNSRoot is where the daemon's cgroup namespace is rooted, below the cgroup2 mount:
// the mount's root, as mountinfo names it from inside the namespace, climbs k levels
// ("/../../.."), so the root is the one cgroup k levels down that holds the daemon (or
// its own cgroup's ancestor there). Read once; a node has a few hundred cgroups that deep.
func findNSRoot(procRoot string) (string, error) {
	entries, err := mountinfo.Read(procRoot)
	if err != nil && len(entries) == 0 {
		return "", err
	}
	var mount mountinfo.Entry
	for _, e := range entries {
		if e.FSType == "cgroup2" {
			mount = e
		}
	}
	if mount.MountPoint == "" {
		return "", errors.New("no cgroup2 mount")
	}
	up := 0
	for _, c := range strings.Split(strings.Trim(mount.Root, "/"), "/") {
		if c != ".." {
			return "", fmt.Errorf("the cgroup2 mount %s is rooted at %s, beside sandboxd's cgroup namespace, not above it", mount.MountPoint, mount.Root)
		}
		up++
	}
	own, err := rawCgroup(procRoot, "self")
	if err != nil {
		return "", err
	}
	ownDepth := 0
	if own != "/" {
		ownDepth = len(strings.Split(strings.Trim(own, "/"), "/"))
	}
	self := strconv.Itoa(os.Getpid())
	var found string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if found != "" {
			return
		}
		if depth == up+ownDepth {
			if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && slices.Contains(strings.Fields(string(b)), self) {
				found = dir
			}
			return
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.IsDir() {
				walk(filepath.Join(dir, e.Name()), depth+1)
			}
		}
	}
	walk(mount.MountPoint, 0)
	if found == "" {
		return "", fmt.Errorf("sandboxd's cgroup namespace root (%d levels below %s) not found in the cgroup2 mount", up, mount.MountPoint)
	}
	rel, _ := filepath.Rel(mount.MountPoint, found)
	root := "/" + rel
	for i := 0; i < ownDepth; i++ {
		root = path.Dir(root)
	}
	return root, nil
}
