// Package proclocks reads /proc/locks: which inodes are held under a lock. sandboxd
// never takes a lock to find out (trying races the owner's own LOCK_NB, misses POSIX and
// OFD locks, and opening a planted FIFO blocks); retention uses it for job liveness,
// reclaim for whether a package tool (dpkg) is busy.
package proclocks

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Inode names an inode the way /proc/locks does.
type Inode struct {
	Major, Minor uint32
	Ino          uint64
}

// Parse adds the inodes held under a lock (FLOCK, POSIX and OFDLCK; not LEASE or DELEG)
// to out. A line "N: -> ..." is a waiter, not a holder, and is skipped: a waiter always
// stands behind a holder's line for the same inode. The device field is "%02x:%02x" (hex
// major:minor), the inode decimal: see fs/locks.c lock_get_status. Malformed lines are
// skipped, never fatal.
func Parse(data []byte, out map[Inode]struct{}) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		// id: TYPE ADVISORY|MANDATORY READ|WRITE PID MAJ:MIN:INO START END
		f := strings.Fields(string(line))
		if len(f) < 7 || !strings.HasSuffix(f[0], ":") || f[1] == "->" {
			continue
		}
		switch f[1] {
		case "FLOCK", "POSIX", "OFDLCK":
		default:
			continue
		}
		parts := strings.Split(f[5], ":")
		if len(parts) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(parts[0], 16, 32)
		min, err2 := strconv.ParseUint(parts[1], 16, 32)
		ino, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out[Inode{uint32(maj), uint32(min), ino}] = struct{}{}
	}
}

// Read reads <procRoot>/locks. A missing file (a kernel without it) is "no locks": no
// data, not an error; an unreadable one is an error, and the caller cannot know.
func Read(procRoot string) (map[Inode]struct{}, error) {
	out := map[Inode]struct{}{}
	data, err := os.ReadFile(filepath.Join(procRoot, "locks"))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	Parse(data, out)
	return out, nil
}
