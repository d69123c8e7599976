package pressure

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// Statfs measures the filesystem that holds path now, with no thresholds: the figures the
// CLI shows when the daemon is down. It runs on the caller's goroutine and, like any
// statfs, can block for as long as a hung FUSE server does.
func Statfs(path string) (api.Filesystem, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return api.Filesystem{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	fig, _, err := measurePath(newMountTable("/proc"), abs, time.Now())
	return fig, err
}

// ExistingAncestor is path, or its nearest existing parent (by lstat): a site the
// launcher has not created yet is measured on the filesystem it will be created on. Only
// a name that does not exist is walked past: a path whose lstat fails otherwise (ENOTCONN
// of a dead FUSE server, EIO, EACCES) is returned as it is, so its measure fails and says
// so, rather than measuring the filesystem beneath the mount.
func ExistingAncestor(path string) string {
	for p := path; ; p = filepath.Dir(p) {
		_, err := os.Lstat(p)
		if err == nil || !errors.Is(err, os.ErrNotExist) || p == "/" || p == "." {
			return p
		}
	}
}

// measurePath stats path (for st_dev) and statfs's it, then names its mount from the
// table. It returns the bare figures and the device number.
func measurePath(mt *mountTable, path string, now time.Time) (api.Filesystem, uint64, error) {
	var st unix.Stat_t
	if err := retryEINTR(func() error { return unix.Stat(path, &st) }); err != nil {
		return api.Filesystem{}, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	var sf unix.Statfs_t
	if err := retryEINTR(func() error { return unix.Statfs(path, &sf) }); err != nil {
		return api.Filesystem{}, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	fig := figures(&sf)
	fig.Path = path
	dev := uint64(st.Dev)
	maj, min := unix.Major(dev), unix.Minor(dev)
	fig.Devno = fmt.Sprintf("%d:%d", maj, min)
	if e, ok := mt.forDevice(path, maj, min); ok {
		// device is the mount source, what node_exporter's device label holds
		// ("/dev/vda1", "tmpfs"), so sandboxd's and node_exporter's series join on it.
		fig.Mountpoint, fig.FSType, fig.Device = e.MountPoint, e.FSType, e.Source
	}
	fig.SampledAt = now
	return fig, dev, nil
}

// retryEINTR repeats a call the Go runtime's own signals (preemption) interrupted.
func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// figures converts statfs(2) counts. Block counts are in units of f_frsize, not f_bsize
// (f_bsize is the preferred I/O size and differs on e.g. some network filesystems); a
// zero f_frsize (very old kernels) falls back to f_bsize.
func figures(sf *unix.Statfs_t) api.Filesystem {
	unit := uint64(sf.Frsize)
	if unit == 0 {
		unit = uint64(sf.Bsize)
	}
	fig := api.Filesystem{
		SizeBytes:  sf.Blocks * unit,
		AvailBytes: sf.Bavail * unit,
		FreeBytes:  sf.Bfree * unit,
		Files:      sf.Files,
		FilesFree:  sf.Ffree,
	}
	fig.UsedRatio = api.UsedRatioOf(fig.SizeBytes, fig.FreeBytes, fig.AvailBytes)
	return fig
}
