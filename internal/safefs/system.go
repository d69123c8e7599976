package safefs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The system directories no age or size rule may prune, and why: a site or cache root set
// to one of them, or to a directory inside one, by a typo ("/usr/bin" for "/usr/local/ci")
// would delete a system's files by age. This is the list rm --preserve-root,
// systemd-tmpfiles and tmpreaper keep away from, extended to whole subtrees.

// insideSystem are refused as a root and everything beneath them.
var insideSystem = []string{"/etc", "/bin", "/sbin", "/boot", "/proc", "/sys", "/var/lib", "/var/log",
	// /run is tmpfs scratch, but these are the system's: unit state, device database,
	// the bus, lock files, sandboxd's own socket.
	"/run/systemd", "/run/udev", "/run/dbus", "/run/lock", "/run/mount", "/run/sandboxd"}

// exactSystem are refused as a root themselves, while a directory beneath them may be one:
// /var/tmp/ci, /run/user/1000/ci, /home/ci/work.
var exactSystem = []string{"/var", "/home", "/run", "/run/user", "/usr/local", "/dev/shm"}

// usrLocalSystem are the subtrees of /usr/local that hold installed software.
var usrLocalSystem = []string{"bin", "sbin", "etc", "include", "man", "share/man"}

// SystemRoot says why the clean absolute path p must not be a deletion root, "" when it
// may be. A user's home directory itself (/home/NAME, /root) is refused too: a site would
// prune the user's files by age, a cache's wipe would empty it. A cache beneath a home
// (~/.cache/go-build) is what discovery finds, so it is fine.
func SystemRoot(p string) string {
	if p == "/" {
		return "is the root directory: everything on the machine lies beneath it"
	}
	for _, d := range insideSystem {
		if inside(p, d) {
			return systemWhy(p, d)
		}
	}
	first, rest, _ := strings.Cut(p[1:], "/")
	if isLibDir(first) {
		return systemWhy(p, "/"+first)
	}
	for _, d := range exactSystem {
		if p == d {
			return fmt.Sprintf("is %s: a system directory, only a directory beneath it may be a root", d)
		}
	}
	switch first {
	case "usr":
		// /usr is the system's, except the site-local scratch of /usr/local (an existing
		// setup keeps its caches in /usr/local/cache), but not its installed software.
		local, ok := strings.CutPrefix(rest, "local/")
		if !ok {
			return systemWhy(p, "/usr")
		}
		top, _, _ := strings.Cut(local, "/")
		if isLibDir(top) || top == "libexec" {
			return systemWhy(p, "/usr/local/"+top)
		}
		for _, d := range usrLocalSystem {
			if inside(local, d) {
				return systemWhy(p, "/usr/local/"+d)
			}
		}
	case "dev":
		// /dev/shm is a tmpfs scratch area; the rest of /dev is device nodes.
		if !strings.HasPrefix(rest, "shm/") {
			return systemWhy(p, "/dev")
		}
	case "run":
		// /run/user/UID is a user's runtime dir (sockets, the user's bus): like a home.
		if u, ok := strings.CutPrefix(rest, "user/"); ok && !strings.Contains(u, "/") {
			return "is a user's runtime directory (/run/user/UID): only a directory beneath it may be a root"
		}
	case "home":
		if !strings.Contains(rest, "/") {
			return "is a user's home directory: only a directory beneath it may be a root"
		}
	case "root":
		if rest == "" {
			return "is root's home directory: only a directory beneath it may be a root"
		}
	}
	return ""
}

func systemWhy(p, d string) string {
	if p == d {
		return fmt.Sprintf("is %s: a system directory", d)
	}
	return fmt.Sprintf("lies inside %s: a system directory", d)
}

// isLibDir: lib, lib32, lib64, libx32 (any multilib dir), not someone's "library".
func isLibDir(name string) bool {
	rest, ok := strings.CutPrefix(name, "lib")
	return ok && strings.Trim(rest, "0123456789x") == "" && (rest == "" || strings.ContainsAny(rest, "0123456789"))
}

// inside says whether the clean path p is dir or lies beneath it.
func inside(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// pseudoFS are the kernel's filesystems: nothing in them is a file a user wrote, and a
// "deletion" there writes to the kernel (cgroup.kill, a sysfs knob).
var pseudoFS = map[string]bool{"proc": true, "sysfs": true, "cgroup": true, "cgroup2": true,
	"devtmpfs": true, "devpts": true, "securityfs": true, "debugfs": true, "tracefs": true,
	"bpf": true, "configfs": true, "pstore": true, "efivarfs": true, "binfmt_misc": true,
	"fusectl": true, "mqueue": true, "hugetlbfs": true, "nsfs": true, "autofs": true}

// CheckSystem says why the open root must not be worked on because of where it really is,
// "" when it may be: a real location (the directory it is inside its filesystem, found
// where that filesystem is mounted whole, so a bind mount of /usr/bin at /srv/x is /usr/bin)
// is a system directory or lies inside one (SystemRoot), or it is on one of the kernel's
// pseudo-filesystems (a mount of /proc, /sys or /dev elsewhere). The text of the path is
// what the config check already judged; this is what the walk reached.
func (r *Root) CheckSystem() string {
	m, reals, err := r.realPaths()
	if err != nil {
		// Fail closed: a root whose place cannot be told is not worked on until it can.
		return fmt.Sprintf("root %s: cannot tell where it really is: %v", r.path, err)
	}
	if pseudoFS[m.fstype] {
		return fmt.Sprintf("root %s is on the kernel's %s filesystem (mounted at %s): not a place for files to prune", r.path, m.fstype, m.point)
	}
	if why := SystemRoot(r.path); why != "" {
		return fmt.Sprintf("root %s %s", r.path, why)
	}
	for _, real := range reals {
		if real == r.path {
			continue
		}
		if why := SystemRoot(real); why != "" {
			return fmt.Sprintf("root %s is really %s (a bind mount of it), which %s", r.path, real, why)
		}
	}
	return ""
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	id     uint64
	dev    string // major:minor
	root   string // the directory of the filesystem mounted here
	point  string // where it is mounted
	fstype string
}

// realPaths finds the root's mount (by the mount id statx gives for the very fd held),
// maps the root to its place in its filesystem, and that to each mount of the filesystem
// that shows the most of it (the smallest mount root: "/" for the system's own mount of
// it): the root's real locations. A filesystem mounted whole twice (a bind of / at
// /srv/r) gives two, and each is judged; a bind of a subtree elsewhere (a directory
// handed to a container) is a view, not where the directory lives, so it is not.
func (r *Root) realPaths() (mountEntry, []string, error) {
	var stx unix.Statx_t
	if err := unix.Statx(r.fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil {
		return mountEntry{}, nil, fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return mountEntry{}, nil, fmt.Errorf("the kernel gives no mount id (Linux >= 5.8 needed)")
	}
	ms, err := readMountinfo()
	if err != nil {
		return mountEntry{}, nil, err
	}
	var m mountEntry
	found := false
	for _, e := range ms {
		if e.id == stx.Mnt_id {
			m, found = e, true
		}
	}
	if !found {
		return mountEntry{}, nil, fmt.Errorf("mount %d is not in /proc/self/mountinfo", stx.Mnt_id)
	}
	if !inside(r.path, m.point) && m.point != "/" {
		return m, nil, fmt.Errorf("%s is not beneath its mount point %s", r.path, m.point)
	}
	fsPath := path.Join(m.root, strings.TrimPrefix(strings.TrimPrefix(r.path, m.point), "/"))
	minRoot := len(m.root)
	var views []mountEntry
	for _, e := range ms {
		if e.dev == m.dev && (e.root == "/" || inside(fsPath, e.root)) {
			views = append(views, e)
			minRoot = min(minRoot, len(e.root))
		}
	}
	var out []string
	for _, e := range views {
		if len(e.root) == minRoot {
			under := strings.TrimPrefix(strings.TrimPrefix(fsPath, e.root), "/")
			out = append(out, path.Join(e.point, under))
		}
	}
	return m, out, nil
}

func readMountinfo() ([]mountEntry, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, mountEntry{id: id, dev: f[2], root: unescapeMount(f[3]),
			point: unescapeMount(f[4]), fstype: f[sep+1]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
