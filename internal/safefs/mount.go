package safefs

import (
	"golang.org/x/sys/unix"
)

// IsMountPoint reports whether name in the directory parentFd is a mount point, st being its
// lstat. statx's STATX_ATTR_MOUNT_ROOT (Linux >= 5.8) catches a bind mount of the same
// device, which a st_dev comparison cannot; without it, the mount ids of parent and child
// are compared, and last the devices.
func IsMountPoint(parentFd int, name string, st unix.Stat_t) bool {
	var child unix.Statx_t
	err := unix.Statx(parentFd, name, statxFlags, statxMask|unix.STATX_MNT_ID, &child)
	if err == nil {
		if child.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
			return child.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
		}
		var parent unix.Statx_t
		if unix.Statx(parentFd, "", unix.AT_EMPTY_PATH|statxFlags, statxMask|unix.STATX_MNT_ID, &parent) == nil &&
			child.Mask&parent.Mask&unix.STATX_MNT_ID != 0 {
			return child.Mnt_id != parent.Mnt_id
		}
	}
	var pst unix.Stat_t
	if unix.Fstat(parentFd, &pst) != nil {
		return true // cannot tell: treat as a mount point, which callers skip
	}
	return st.Dev != pst.Dev
}
