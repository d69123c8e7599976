package mountwatch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// canaryPrefix is the reserved name prefix of canary files; nothing else in a mount may
// use it.
const canaryPrefix = ".sandboxd-canary-"

// probeResult is the one JSON line a probe child prints.
type probeResult struct {
	OK    bool   `json:"ok"`
	Op    string `json:"op,omitempty"`
	Errno string `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
}

// ProbeMain is the probe child's entry point: the CLI's hidden `sandboxd mount-probe`
// subcommand calls it with its arguments and exits with the result. It runs in a child so
// that a hung FUSE mount traps a disposable process in uninterruptible sleep, never a
// daemon thread (FIELD-NOTES: a stat of the root proves nothing; lookup, readdir and
// create do). Flags: --path DIR (required), --canary (create+write+fsync+unlink a file
// under a reserved name), --fsync (only fsync the mount root, before a remount); --serve
// answers such requests, one JSON line each, for as long as stdin stays open. It prints
// one JSON line such as {"ok":false,"op":"create","errno":"EACCES"} and returns 0 when
// healthy, 1 when an operation failed, 2 on bad arguments.
func ProbeMain(args []string, stdout io.Writer) int {
	fl := flag.NewFlagSet("mount-probe", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	path := fl.String("path", "", "mount root to probe")
	canary := fl.Bool("canary", false, "create, write, fsync and unlink a canary file")
	fsyncOnly := fl.Bool("fsync", false, "only fsync the mount root")
	serve := fl.Bool("serve", false, "serve probe requests from stdin (probeserver.go)")
	if err := fl.Parse(args); err == nil && *serve {
		return serveProbes(os.Stdin, stdout)
	}
	if err := fl.Parse(args); err != nil || *path == "" || !filepath.IsAbs(*path) {
		writeResult(stdout, probeResult{Op: "args", Error: "usage: mount-probe --path ABSDIR [--canary|--fsync]"})
		return 2
	}
	var r probeResult
	if *fsyncOnly {
		r = fsyncRoot(*path)
	} else {
		r = probe(*path, *canary)
	}
	writeResult(stdout, r)
	if r.OK {
		return 0
	}
	return 1
}

func writeResult(w io.Writer, r probeResult) {
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "%s\n", b)
}

func fail(op string, err error) probeResult {
	return probeResult{Op: op, Errno: errnoName(err), Error: err.Error()}
}

// probe works beneath one fd of the mount root, opened by openat2 with RESOLVE_NO_SYMLINKS
// (no symlink in any component, not only the last): the canary is created with O_EXCL
// and unlinked by that fd, and only while the name is still the file it created, so a
// parent swapped for a link or another directory while the probe runs cannot turn the
// unlink into one somewhere else (issue 9). What it may remove is a file it made a moment
// before under a random reserved name, with the mount owner's rights (the probe runs as
// the owner: ownerCred).
func probe(root string, canary bool) probeResult {
	name := randomName()
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	rfd, err := openat2Retry(unix.AT_FDCWD, root, &how)
	if errors.Is(err, unix.ELOOP) {
		return fail("opendir", fmt.Errorf("open %s: a component is a symlink, which the probe does not follow: %w", root, err))
	}
	if err != nil {
		return fail("opendir", fmt.Errorf("open %s: %w", root, err))
	}
	defer unix.Close(rfd)
	// A random name forces a LOOKUP to the daemon; ENOENT is the healthy answer.
	var st unix.Stat_t
	if err := unix.Fstatat(rfd, ".sandboxd-probe-"+name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
		return fail("lookup", fmt.Errorf("lstat %s/.sandboxd-probe-%s: %w", root, name, err))
	}
	dfd, err := unix.Openat(rfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("opendir", fmt.Errorf("open %s: %w", root, err))
	}
	d := os.NewFile(uintptr(dfd), root)
	_, err = d.Readdirnames(64)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return fail("readdir", err)
	}
	if !canary {
		return probeResult{OK: true}
	}
	cname := canaryPrefix + name
	p := filepath.Join(root, cname)
	fd, err := unix.Openat(rfd, cname, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fail("create", &os.PathError{Op: "open", Path: p, Err: err})
	}
	f := os.NewFile(uintptr(fd), p)
	_, werr := f.Write([]byte("sandboxd canary\n"))
	serr := f.Sync()
	var made unix.Stat_t
	unix.Fstat(fd, &made)
	cerr := f.Close()
	if beforeCanaryUnlink != nil {
		beforeCanaryUnlink(root, cname)
	}
	uerr := unlinkIfSame(rfd, cname, &made)
	switch {
	case werr != nil:
		return fail("write", werr)
	case serr != nil:
		return fail("fsync", serr)
	case cerr != nil:
		return fail("close", cerr)
	case uerr != nil:
		return fail("unlink", &os.PathError{Op: "unlink", Path: p, Err: uerr})
	}
	return probeResult{OK: true}
}

// beforeCanaryUnlink, when set (tests only), runs between the canary's close and its
// unlink, so a test can swap the mount's parent at the worst moment.
var beforeCanaryUnlink func(root, name string)

// unlinkIfSame unlinks name beneath dirfd when it is still the file made (same inode).
func unlinkIfSame(dirfd int, name string, made *unix.Stat_t) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Dev != made.Dev || st.Ino != made.Ino {
		return fmt.Errorf("the canary was replaced by another file, left alone: %w", unix.EEXIST)
	}
	return unix.Unlinkat(dirfd, name, 0)
}

func openat2Retry(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, path, how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// fsyncRoot flushes what the daemon buffers before it is stopped (geesefs uploads on fsync).
func fsyncRoot(root string) probeResult {
	d, err := os.Open(root)
	if err != nil {
		return fail("open", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return fail("fsync", err)
	}
	return probeResult{OK: true}
}

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errnoName gives the symbolic name of the errno inside err ("EACCES"), or "" if none.
func errnoName(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return ""
	}
	if n := unix.ErrnoName(en); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(en))
}
