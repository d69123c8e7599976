package api

import (
	"fmt"
	"math"
	"strconv"
)

// The judgements every part of sandboxd makes of a measured filesystem, in one place: the
// daemon's launch answers, reclaim's run details and the CLI's own measurement say them
// the same way.

// Fingerprint is the part of a detail line that names a filesystem's condition
// (CONTRACT §3): "/ has 0 B free of 11.0 GiB (100% used) and 12 of 720,896 inodes free".
// A path that is not its mount point also names the mount point and filesystem type.
func (fs Filesystem) Fingerprint() string {
	return string(fs.AppendFingerprint(make([]byte, 0, 192)))
}

// AppendFingerprint appends Fingerprint() to dst (strconv, not fmt: every launch answer
// says it, issue 27).
func (fs Filesystem) AppendFingerprint(dst []byte) []byte {
	dst = append(dst, fs.Path...)
	if fs.Mountpoint != "" && fs.Mountpoint != fs.Path {
		dst = append(append(append(append(append(dst, " (on "...), fs.Mountpoint...), ", "...), fs.FSType...), ')')
	}
	dst = AppendSize(append(dst, " has "...), fs.AvailBytes)
	dst = AppendSize(append(dst, " free of "...), fs.SizeBytes)
	dst = strconv.AppendFloat(append(dst, " ("...), fs.Used()*100, 'f', 0, 64) // as fmt's %.0f
	dst = append(dst, "% used)"...)
	if fs.Files > 0 {
		dst = AppendCount(append(dst, " and "...), fs.FilesFree)
		dst = AppendCount(append(dst, " of "...), fs.Files)
		dst = append(dst, " inodes free"...)
	} else {
		dst = append(dst, " and no inode limit"...)
	}
	if fs.Stale {
		dst = append(dst, " (figures are stale: statfs is not answering)"...)
	}
	return append(append(dst, fs.ReleasedClause()...), SizedBy(fs.SizeSetting)...)
}

// SizedBy is the clause that ends every message about a filesystem whose size_setting is
// set, so a full disk says where to grow it: "; this disk is sized by
// [openshell.drivers.vm] overlay_disk_mib" ("" when not set).
func SizedBy(setting string) string {
	if setting == "" {
		return ""
	}
	return "; this disk is sized by " + setting
}

// Used is the share of the filesystem in use as df's "Use%" counts it: UsedRatio, or,
// where that is not filled in, derived from the same fields (UsedRatioOf); always in [0, 1].
func (fs Filesystem) Used() float64 {
	r := fs.UsedRatio
	if r == 0 && fs.SizeBytes > 0 {
		r = UsedRatioOf(fs.SizeBytes, fs.FreeBytes, fs.AvailBytes)
	}
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	return min(r, 1)
}

// UsedRatioOf is df's "Use%": used / (used + avail), with used = size - free, so the root
// reservation counts as unavailable, as a non-root writer sees it (1-avail/size counts
// root's reserved blocks as used, and said 69% on a disk df showed at 15%). It is 0 for a
// zero-size filesystem and always finite, in [0, 1].
func UsedRatioOf(size, free, avail uint64) float64 {
	used := uint64(0)
	if size > free {
		used = size - free
	}
	den := float64(used) + float64(avail)
	if den <= 0 {
		return 0
	}
	r := float64(used) / den
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	return min(r, 1)
}

// WorkloadAvail is the free space that is the workload's: avail_bytes less the room of a
// released reserve (CONTRACT §13). That room is kept for booting, reading and removing
// files; counted as health it was eaten by the next command and the box then stopped at
// 100% with nothing left to release.
func (fs Filesystem) WorkloadAvail() uint64 {
	return fs.AvailBytes - min(fs.ReserveReleasedBytes, fs.AvailBytes)
}

// ReleasedClause is "; 8.0 MiB of it is the released reserve, kept for booting and
// reading, not the workload's" while a reserve is released ("" otherwise).
func (fs Filesystem) ReleasedClause() string {
	if fs.ReserveReleasedBytes == 0 || fs.AvailBytes == 0 {
		return ""
	}
	return fmt.Sprintf("; %s of it is the released reserve, kept for booting and reading, not the workload's",
		FormatSize(min(fs.ReserveReleasedBytes, fs.AvailBytes)))
}
