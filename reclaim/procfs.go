package reclaim

import (
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
	"github.com/sandboxd/sandboxd/internal/proclocks"
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

// lockHeld reports whether the file at path is held under a lock, by reading /proc/locks
// (never by trying the lock: that would race the owner and miss POSIX/OFD locks).
func lockHeld(procRoot, path string) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return false // no lock file: nobody can hold it
	}
	locks, err := proclocks.Read(procRoot)
	if err != nil {
		return true // cannot tell: assume busy, a skipped gc costs little
	}
	_, held := locks[proclocks.Inode{Major: unix.Major(uint64(st.Dev)), Minor: unix.Minor(uint64(st.Dev)), Ino: st.Ino}]
	return held
}
