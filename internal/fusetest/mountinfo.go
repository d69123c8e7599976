package fusetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// fusectlDir is where the kernel's FUSE control filesystem is normally mounted.
const fusectlDir = "/sys/fs/fuse/connections"

// readMountinfo reads /proc/self/mountinfo, which never blocks even with a hung mount.
func readMountinfo() []mountinfo.Entry {
	es, _ := mountinfo.Read("/proc")
	return es
}

func isFUSE(fsType string) bool { return fsType == "fuse" || strings.HasPrefix(fsType, "fuse.") }

// mountsUnder are the mounts at or beneath dir, newest first.
func mountsUnder(entries []mountinfo.Entry, dir string) []mountinfo.Entry {
	var out []mountinfo.Entry
	for _, e := range entries {
		if e.MountPoint == dir || strings.HasPrefix(e.MountPoint, dir+"/") {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MountID > out[j].MountID })
	return out
}

// detach aborts the FUSE connections at or under Dir (so no caller stays stuck in a hung
// request) and lazily unmounts every mount there, newest first.
func (s *Server) detach() {
	mine := mountsUnder(readMountinfo(), s.Dir)
	for _, e := range mine {
		if isFUSE(e.FSType) {
			abortConn(e.Minor)
		}
	}
	for _, e := range mine {
		unix.Unmount(e.MountPoint, unix.MNT_DETACH)
	}
}

// Abort aborts the connection of every FUSE mount at Dir, as the daemon does for a hung
// mount; the mounts stay, dead (ENOTCONN).
func (s *Server) Abort() error {
	var errs []string
	for _, e := range readMountinfo() {
		if e.MountPoint == s.Dir && isFUSE(e.FSType) {
			if err := abortConn(e.Minor); err != nil {
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
		if e.MountPoint == fusectlDir && e.FSType == "fusectl" {
			mounted = true
		}
	}
	if !mounted {
		tmp, err := os.MkdirTemp("", "fusetest-fusectl-")
		if err != nil {
			return err
		}
		if err := unix.Mount("fusectl", tmp, "fusectl", 0, ""); err != nil {
			os.Remove(tmp) // by path: test support, never linked into sandboxd; the MkdirTemp above
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer func() {
			unix.Unmount(tmp, unix.MNT_DETACH)
			os.Remove(tmp) // by path: as above
		}()
		dir = tmp
	}
	err := os.WriteFile(filepath.Join(dir, strconv.FormatUint(uint64(minor), 10), "abort"), []byte("1"), 0)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("abort fuse connection %d: %w", minor, err)
	}
	return nil
}
