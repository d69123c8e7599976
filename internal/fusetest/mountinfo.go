package fusetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fusectlDir is where the kernel's FUSE control filesystem is normally mounted.
const fusectlDir = "/sys/fs/fuse/connections"

// mountEntry is the part of a /proc/self/mountinfo line this package needs.
type mountEntry struct {
	id         int
	minor      uint32
	mountPoint string
	fsType     string
}

// readMountinfo parses /proc/self/mountinfo, which never blocks even with a hung mount.
func readMountinfo() []mountEntry {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		id, _ := strconv.Atoi(f[0])
		_, min, _ := strings.Cut(f[2], ":")
		minor, _ := strconv.ParseUint(min, 10, 32)
		out = append(out, mountEntry{id: id, minor: uint32(minor), mountPoint: unescape(f[4]), fsType: f[sep+1]})
	}
	return out
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

func isFUSE(fsType string) bool { return fsType == "fuse" || strings.HasPrefix(fsType, "fuse.") }

// mountsUnder are the mounts at or beneath dir, newest first.
func mountsUnder(entries []mountEntry, dir string) []mountEntry {
	var out []mountEntry
	for _, e := range entries {
		if e.mountPoint == dir || strings.HasPrefix(e.mountPoint, dir+"/") {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id > out[j].id })
	return out
}

// detach aborts the FUSE connections at or under Dir (so no caller stays stuck in a hung
// request) and lazily unmounts every mount there, newest first.
func (s *Server) detach() {
	mine := mountsUnder(readMountinfo(), s.Dir)
	for _, e := range mine {
		if isFUSE(e.fsType) {
			abortConn(e.minor)
		}
	}
	for _, e := range mine {
		unix.Unmount(e.mountPoint, unix.MNT_DETACH)
	}
}

// Abort aborts the connection of every FUSE mount at Dir, as the daemon does for a hung
// mount; the mounts stay, dead (ENOTCONN).
func (s *Server) Abort() error {
	var errs []string
	for _, e := range readMountinfo() {
		if e.mountPoint == s.Dir && isFUSE(e.fsType) {
			if err := abortConn(e.minor); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("abort %s: %s", s.Dir, strings.Join(errs, "; "))
	}
	return nil
}

// abortConn writes to the connection's fusectl abort file, mounting fusectl in a
// temporary directory when it is not at its usual place.
func abortConn(minor uint32) error {
	dir := fusectlDir
	mounted := false
	for _, e := range readMountinfo() {
		if e.mountPoint == fusectlDir && e.fsType == "fusectl" {
			mounted = true
		}
	}
	if !mounted {
		tmp, err := os.MkdirTemp("", "fusetest-fusectl-")
		if err != nil {
			return err
		}
		if err := unix.Mount("fusectl", tmp, "fusectl", 0, ""); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer func() {
			unix.Unmount(tmp, unix.MNT_DETACH)
			os.Remove(tmp)
		}()
		dir = tmp
	}
	err := os.WriteFile(filepath.Join(dir, strconv.FormatUint(uint64(minor), 10), "abort"), []byte("1"), 0)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("abort fuse connection %d: %w", minor, err)
	}
	return nil
}
