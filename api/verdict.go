package api

// One verdict for one filesystem (issue 23): launch, resume, a dry run, check, health,
// status and metrics all say the word Judge gives, from the same figures, so no two of
// them can disagree about one disk.

// Filesystem verdicts. VerdictLow and VerdictReplace are also a run's verdicts; a run that
// ends at or above every threshold says healthy or reclaimed, a filesystem says ok.
const VerdictOK = "ok"

// Judge is the one function that decides the filesystem's verdict from its figures: replace below a replace_below*
// threshold (or while reclaim's ReplaceMark holds), low below a reclaim_below* threshold,
// ok otherwise. Byte thresholds do not apply to a filesystem that reports a size of 0,
// inode thresholds not to one without an inode limit. A filesystem whose statfs fails has
// no verdict (""): nothing is known of its space.
func (fs Filesystem) Judge() string {
	switch {
	case fs.Error != "":
		return ""
	case fs.BelowReplace() || fs.ReplaceMark != "":
		return VerdictReplace
	case fs.BelowReclaim():
		return VerdictLow
	}
	return VerdictOK
}

// BytesBelowReclaim reports whether the workload's free space (WorkloadAvail: a released
// reserve's room is not health) is below its
// (effective, adaptive) reclaim threshold; never for a filesystem that reports no size.
func (fs Filesystem) BytesBelowReclaim() bool {
	return fs.SizeBytes > 0 && fs.WorkloadAvail() < fs.ReclaimThresholdBytes
}

// InodesBelowReclaim reports whether free inodes are below reclaim_below_inodes.
func (fs Filesystem) InodesBelowReclaim() bool {
	return fs.Files > 0 && fs.FilesFree < fs.ReclaimThresholdFiles
}

// BytesBelowReplace reports whether the healthy free space is below replace_below.
func (fs Filesystem) BytesBelowReplace() bool {
	return fs.SizeBytes > 0 && fs.WorkloadAvail() < fs.ReplaceThresholdBytes
}

// InodesBelowReplace reports whether free inodes are below replace_below_inodes.
func (fs Filesystem) InodesBelowReplace() bool {
	return fs.Files > 0 && fs.FilesFree < fs.ReplaceThresholdFiles
}

// BelowReclaim reports whether the filesystem is below a reclaim_below* threshold.
func (fs Filesystem) BelowReclaim() bool { return fs.BytesBelowReclaim() || fs.InodesBelowReclaim() }

// BelowReplace reports whether the filesystem is below a replace_below* threshold.
func (fs Filesystem) BelowReplace() bool { return fs.BytesBelowReplace() || fs.InodesBelowReplace() }

// RunVerdictOK reports whether a run's verdict (healthy, reclaimed, low, replace) says the
// filesystem verdict ok: the run's words and the filesystem's map one to one otherwise.
func RunVerdictOK(v string) bool { return v == VerdictHealthy || v == VerdictReclaimed }
