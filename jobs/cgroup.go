package jobs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// cgroup2Magic is CGROUP2_SUPER_MAGIC (linux/magic.h).
const cgroup2Magic = 0x63677270

// FindRoot works out the default cgroup root for jobs (CONTRACT §11): the daemon's own
// cgroup when systemd delegated it (Delegate=yes marks it with the trusted.delegate
// xattr), else "<cgroup2 mount>/sandboxd". The cgroup2 mount is read from mountinfo,
// never assumed: on a hybrid host it is /sys/fs/cgroup/unified, and /sys/fs/cgroup is a
// tmpfs of v1 hierarchies. delegated says the root is the daemon's own subtree, which
// means the daemon must move itself into a leaf before it puts jobs beside it.
func FindRoot(procRoot string) (root string, delegated bool, err error) {
	mount, err := cgroup2Mount(procRoot)
	if err != nil {
		return "", false, err
	}
	if own, err := ownCgroup(procRoot); err == nil && own != "/" {
		dir := filepath.Join(mount, own)
		if isDelegated(dir) {
			return dir, true, nil
		}
	}
	return filepath.Join(mount, "sandboxd"), false, nil
}

func cgroup2Mount(procRoot string) (string, error) {
	entries, err := mountinfo.Read(procRoot)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.FSType == "cgroup2" {
			return e.MountPoint, nil
		}
	}
	return "", errors.New("no cgroup2 filesystem in " + filepath.Join(procRoot, "self/mountinfo") + " (a cgroup v1-only host)")
}

// ownCgroup is the daemon's cgroup v2 path ("0::/path" in /proc/self/cgroup).
func ownCgroup(procRoot string) (string, error) {
	return pidCgroup(procRoot, "self")
}

// pidCgroup is pid's cgroup v2 path below the cgroup2 mount (cgroupns.go: also when the
// daemon's cgroup namespace names it relative to its root, "/../..").
func pidCgroup(procRoot, pid string) (string, error) {
	p, err := rawCgroup(procRoot, pid)
	if err != nil {
		return "", err
	}
	return belowMount(procRoot, p)
}

// rawCgroup is pid's cgroup v2 path as <procRoot>/PID/cgroup names it.
func rawCgroup(procRoot, pid string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, pid, "cgroup"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return strings.TrimSuffix(p, " (deleted)"), nil
		}
	}
	return "", fmt.Errorf("%s/%s/cgroup has no cgroup v2 line", procRoot, pid)
}

func isDelegated(dir string) bool {
	buf := make([]byte, 8)
	for _, name := range []string{"trusted.delegate", "user.delegate"} {
		if n, err := unix.Getxattr(dir, name, buf); err == nil && string(buf[:n]) == "1" {
			return true
		}
	}
	return false
}

// checkCgroup2 says whether dir, or its nearest existing ancestor, is on cgroup2.
func checkCgroup2(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if err == nil {
			if st.Type != cgroup2Magic {
				return fmt.Errorf("%s is not on a cgroup2 filesystem (statfs type %#x)", d, st.Type)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || d == "/" {
			return fmt.Errorf("statfs %s: %w", d, err)
		}
	}
}

// procsOf lists the pids of dir and of every cgroup below it.
func procsOf(dir string) ([]int, error) {
	var out []int
	err := walkCgroups(dir, func(d string) error {
		b, err := readCgroupFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return nil
	})
	return out, err
}

// walkCgroups calls f for dir and every cgroup below it, parents first.
func walkCgroups(dir string, f func(string) error) error {
	if err := f(dir); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := walkCgroups(filepath.Join(dir, e.Name()), f); err != nil {
				return err
			}
		}
	}
	return nil
}

// events reads cgroup.events: "populated" (processes in dir or below) and "frozen".
func events(dir string) (populated, frozen bool, err error) {
	b, err := readCgroupFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, false, err
	}
	populated, frozen = parseEvents(b)
	return populated, frozen, nil
}

// parseEvents reads cgroup.events' "populated" and "frozen" keys.
func parseEvents(b []byte) (populated, frozen bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "populated":
			populated = v == "1"
		case "frozen":
			frozen = v == "1"
		}
	}
	return populated, frozen
}

// readCgroupFile reads a cgroupfs file with plain read(2)s. os.ReadFile would register it
// with Go's network poller, cgroupfs files being pollable: an epoll_ctl to add it and one
// to remove it, about half of the ~17 µs a read of cgroup.procs takes on a VM. A spawn's
// answer waits for such reads (issue 27).
func readCgroupFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		default:
			b = b[:len(b)+n]
		}
	}
}

func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", s, path, err)
	}
	return nil
}

// hasKill says whether the kernel has cgroup.kill (Linux ≥ 5.14) in dir.
func hasKill(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.kill"))
	return err == nil
}

// killAll SIGKILLs every process of dir and below: one write to cgroup.kill, race-free
// against forks; without it, freeze, SIGKILL every pid, thaw (a frozen process cannot
// fork, so none slips out between listing and signalling).
func (c cgroupFS) killAll(ctx context.Context, dir string, useKill bool) error {
	if useKill && hasKill(dir) {
		return writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	}
	if err := writeFile(filepath.Join(dir, "cgroup.freeze"), "1"); err != nil {
		return err
	}
	defer writeFile(filepath.Join(dir, "cgroup.freeze"), "0")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	waitEvents(wctx, dir, func(_, frozen bool) bool { return frozen })
	cancel()
	_, err := c.signalAll(dir, unix.SIGKILL)
	return err
}

// cgroupFS is one cgroup2 mount as seen through one procfs.
type cgroupFS struct {
	mount    string // where cgroup2 is mounted, e.g. /sys/fs/cgroup/unified
	procRoot string
}

// rel is dir as /proc/PID/cgroup names it: the path below the cgroup2 mount.
func (c cgroupFS) rel(dir string) string {
	r, err := filepath.Rel(c.mount, dir)
	if err != nil || r == "." {
		return "/"
	}
	return "/" + r
}

// in says whether pid's cgroup is dir or below it.
func (c cgroupFS) in(pid int, dir string) bool {
	cg, err := pidCgroup(c.procRoot, strconv.Itoa(pid))
	rel := c.rel(dir)
	return err == nil && (cg == rel || strings.HasPrefix(cg, rel+"/"))
}

// signalAll sends sig to every process of dir and below, each through a pidfd opened
// first and checked to be in dir afterwards: a pid that exited and was reused by a
// process outside the job between the listing and the signal is never signalled.
func (c cgroupFS) signalAll(dir string, sig unix.Signal) (int, error) {
	pids, err := procsOf(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if c.signalIfIn(pid, dir, sig) {
			n++
		}
	}
	return n, nil
}

func (c cgroupFS) signalIfIn(pid int, dir string, sig unix.Signal) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false // gone (ESRCH) or not ours to see
	}
	defer unix.Close(fd)
	if !c.in(pid, dir) {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// waitEvents waits until cond holds for dir's cgroup.events. It holds the file open and
// polls it for POLLPRI, which kernfs raises when populated or frozen changes (reading the
// file re-arms it: the same notification inotify would report, without an inotify
// instance). An instance per wait took one of fs.inotify.max_user_instances (128 per
// uid, shared by every root process on the host): a lease lapsing for 100 jobs took 100
// of them, and an inotify_init1 that failed made an ending job "leaked" at once. It
// returns ctx's error when the context ends first, nil once the cgroup is gone.
func waitEvents(ctx context.Context, dir string, cond func(populated, frozen bool) bool) error {
	path := filepath.Join(dir, "cgroup.events")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return nil // the cgroup is gone: nothing is left in it
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	for {
		n, err := unix.Pread(fd, buf, 0)
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
			return nil // removed while held open
		}
		if err == nil {
			if pop, frz := parseEvents(buf[:n]); cond(pop, frz) {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// At most a second between reads: a read that failed otherwise (EINTR, ENOMEM)
		// is tried again, never taken for an answer.
		timeout := 1000
		if dl, ok := ctx.Deadline(); ok {
			timeout = int(min(time.Until(dl).Milliseconds()+1, 1000))
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, max(timeout, 1)); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll %s: %w", path, err)
		}
	}
}

// removeTree removes dir and the cgroups below it, children first. A cgroup that still
// has processes answers EBUSY. By path: only empty cgroups, below a root walked safely at
// start, where nothing can be renamed or linked (safepath.go).
func removeTree(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type != cgroup2Magic {
		// A path from the state file or a changed config that is no cgroup: not ours.
		return fmt.Errorf("rmdir %s: not a cgroup2 directory (statfs type %#x): left alone", dir, st.Type)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) { // by path: see above
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}
