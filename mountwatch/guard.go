package mountwatch

import (
	"fmt"
	"path/filepath"

	"github.com/sandboxd/sandboxd/api"
	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h (chattr +i).
const fsImmutableFL = 0x00000010

// maybeGuard makes the bare mountpoint immutable while nothing is mounted on it, so a
// write meant for the mount fails with EPERM instead of landing on the local disk.
// Mounting over an immutable directory still works (checked on tmpfs and ext4). Only for
// mounts root makes: a non-root fusermount checks write access to the mountpoint.
func (w *Watcher) maybeGuard(m *mount) {
	w.mu.Lock()
	// Never for a mount registered by a peer other than root (Add refuses guard for one):
	// the flag needs root, and would make the peer's own fusermount3 fail there.
	want := m.cfg.Guard && !m.present && !m.guarded && m.by().isRoot()
	w.mu.Unlock()
	if !want {
		return
	}
	if w.observe.Load() {
		if w.once(m, "guard") {
			w.emit(api.EventMountGuard, m.cfg.Name, "observe mode: would make the bare mountpoint "+m.cfg.Path+" immutable", nil)
		}
		return
	}
	// Re-check right before touching the directory: a mount may have arrived.
	entries, _ := readMountinfo(w.opts.ProcRoot)
	if _, ok := topmostAt(entries, m.cfg.Path); ok {
		return
	}
	changed, err := setImmutable(m.cfg.Path, true)
	w.mu.Lock()
	if err == nil {
		m.guarded = true
		w.counters.Guards[m.cfg.Name]++
	}
	w.mu.Unlock()
	switch {
	case err != nil:
		if w.once(m, "guard-error") {
			w.emit(api.EventMountGuard, m.cfg.Name, fmt.Sprintf("cannot guard the bare mountpoint: %v", err), nil)
		}
	case changed:
		w.emit(api.EventMountGuard, m.cfg.Name, "made the bare mountpoint "+m.cfg.Path+" immutable while nothing is mounted", nil)
	}
}

// setImmutable sets or clears FS_IMMUTABLE_FL on the directory path itself (never on a
// mount over it: the open must land on the same device as the parent) and reports whether
// the flag changed.
func setImmutable(path string, on bool) (bool, error) {
	var parent unix.Stat_t
	if err := unix.Stat(filepath.Dir(path), &parent); err != nil {
		return false, fmt.Errorf("stat parent of %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("fstat %s: %w", path, err)
	}
	if st.Dev != parent.Dev {
		return false, fmt.Errorf("%s is a mountpoint in use, not the bare directory", path)
	}
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, fmt.Errorf("get flags of %s: %w", path, err)
	}
	nf := flags &^ fsImmutableFL
	if on {
		nf = flags | fsImmutableFL
	}
	if nf == flags {
		return false, nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(nf)); err != nil {
		return false, fmt.Errorf("set flags of %s: %w", path, err)
	}
	return true, nil
}
