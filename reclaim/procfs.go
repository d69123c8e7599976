package reclaim

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// readMountPoints lists every mount point of <procRoot>/self/mountinfo (reading it never
// blocks, even with a hung FUSE mount).
func readMountPoints(procRoot string) []string {
	es, _ := mountinfo.Read(procRoot)
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.MountPoint)
	}
	return out
}

// lockKey identifies a locked inode as /proc/locks does: major:minor:inode.
type lockKey struct {
	major, minor uint32
	ino          uint64
}

// parseLocks reads the inodes held under any lock (FLOCK, POSIX, OFDLCK) from the text
// of /proc/locks. Lines it cannot read are skipped.
func parseLocks(b []byte) map[lockKey]bool {
	out := map[lockKey]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		// "1: POSIX  ADVISORY  WRITE 1234 08:01:1234 0 EOF"; blocked waiters carry "->".
		if len(f) >= 2 && f[1] == "->" {
			f = f[1:]
		}
		if len(f) < 6 {
			continue
		}
		id := strings.Split(f[5], ":")
		if len(id) != 3 {
			continue
		}
		maj, e1 := strconv.ParseUint(id[0], 16, 32)
		mnr, e2 := strconv.ParseUint(id[1], 16, 32)
		ino, e3 := strconv.ParseUint(id[2], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil {
			continue
		}
		out[lockKey{uint32(maj), uint32(mnr), ino}] = true
	}
	return out
}

// lockHeld reports whether the file at path is held under a lock, by reading /proc/locks
// (never by trying the lock: that would race the owner and miss POSIX/OFD locks).
func lockHeld(procRoot, path string) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return false // no lock file: nobody can hold it
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "locks"))
	if err != nil {
		return true // cannot tell: assume busy, a skipped gc costs little
	}
	return parseLocks(b)[lockKey{unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino}]
}
