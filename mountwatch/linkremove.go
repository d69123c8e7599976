package mountwatch

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// removeOwnLink removes the link l beneath its directory as safefs walked it from "/" (no
// symlink in any component, no ancestor another user could swap; issue 9), and only while
// it is still a symlink to l.Target there: a swapped parent cannot turn the unlink into
// one of another directory's entry, and anything else at the name is left alone. For a
// mount registered by a peer other than root it runs inside runas.AsFS with the peer's
// credentials: the kernel refuses what the peer could not remove (the sticky bit, a
// directory it may not write).
func removeOwnLink(l LinkConfig) error {
	dir, base, err := safefs.OpenParent(l.Path)
	if err != nil {
		return err
	}
	defer dir.Close()
	e, err := dir.Lstat(base)
	if err != nil {
		return err
	}
	if e.Type != unix.S_IFLNK {
		return fmt.Errorf("%s is no longer a symlink: left alone", l.Path)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir.Fd(), base, buf)
	if err != nil {
		return fmt.Errorf("readlink %s: %w", l.Path, err)
	}
	if t := string(buf[:n]); t != l.Target {
		return fmt.Errorf("%s points to %s now, not %s: left alone", l.Path, t, l.Target)
	}
	if err := unix.Unlinkat(dir.Fd(), base, 0); err != nil {
		return fmt.Errorf("remove %s: %w", l.Path, err)
	}
	return nil
}
