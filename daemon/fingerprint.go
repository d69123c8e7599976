package daemon

import (
	"fmt"

	"github.com/sandboxd/sandboxd/api"
)

// fsFingerprint is the part of a detail line that names a filesystem's condition:
// "/ has 0 B free of 11.0 GiB (100% used) and 12 of 720,896 inodes free".
func fsFingerprint(fs api.Filesystem) string {
	name := fs.Path
	if fs.Mountpoint != "" && fs.Mountpoint != fs.Path {
		name = fmt.Sprintf("%s (on %s, %s)", fs.Path, fs.Mountpoint, fs.FSType)
	}
	s := fmt.Sprintf("%s has %s free of %s (%.0f%% used)", name, api.FormatSize(fs.AvailBytes),
		api.FormatSize(fs.SizeBytes), fs.UsedRatio*100)
	if fs.Files > 0 {
		s += fmt.Sprintf(" and %s of %s inodes free", api.FormatCount(fs.FilesFree), api.FormatCount(fs.Files))
	} else {
		s += " and no inode limit"
	}
	if fs.Stale {
		s += " (figures are stale: statfs is not answering)"
	}
	return s
}
