package reclaim

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readMountPoints lists every mount point of <procRoot>/self/mountinfo (reading it never
// blocks, even with a hung FUSE mount).
func readMountPoints(procRoot string) []string {
	b, err := os.ReadFile(filepath.Join(procRoot, "self/mountinfo"))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if mp, ok := parseMountinfoLine(line); ok {
			out = append(out, mp)
		}
	}
	return out
}

// parseMountinfoLine returns field 5, the mount point, with its octal escapes decoded.
func parseMountinfoLine(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || !strings.HasPrefix(f[4], "/") {
		return "", false
	}
	return unescapeOctal(f[4]), true
}

// unescapeOctal decodes the \040-style escapes the kernel writes for space, tab, newline
// and backslash (procfs leaves them encoded).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
