package pressure

import (
	"fmt"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// evaluate derives the four pressure signals of one freshly sampled filesystem.
func evaluate(f api.Filesystem, r resolved, warn time.Duration) []signal {
	subject := f.Path
	critical := (f.SizeBytes > 0 && f.AvailBytes == 0) || (f.Files > 0 && f.FilesFree == 0)
	sev := sevWarning
	if critical {
		sev = sevCritical
	}
	space := fmt.Sprintf("%s has %s free of %s (%d%% used)", subject,
		api.FormatSize(f.AvailBytes), api.FormatSize(f.SizeBytes), percent(f.UsedRatio))
	if f.ReserveReleasedBytes > 0 {
		space += fmt.Sprintf(" (%s of it only because the reserve is released, which is not health)", api.FormatSize(min(f.ReserveReleasedBytes, f.AvailBytes)))
	}
	fields := map[string]any{
		"avail_bytes": f.AvailBytes, "size_bytes": f.SizeBytes,
		"files": f.Files, "files_free": f.FilesFree,
		"reclaim_threshold_bytes": r.reclaim,
	}
	out := make([]signal, 0, 4)

	disk := signal{typ: api.CondDiskPressure, subject: subject, severity: sev, fields: fields}
	switch {
	case f.SizeBytes == 0:
		// procfs-like and many FUSE filesystems report no capacity at all: as with
		// f_files == 0, byte thresholds do not apply rather than reading as "full".
		disk.reason = "NoCapacityReported"
		disk.message = subject + " reports a size of 0 (no capacity figures); byte thresholds do not apply"
	case f.BytesBelowReclaim():
		disk.raw, disk.reason = true, "AvailBelowReclaimThreshold"
		disk.message = fmt.Sprintf("%s%s, below %s", space, f.ReleasedClause(), r.desc)
	default:
		disk.reason = "AvailAboveReclaimThreshold"
		disk.message = fmt.Sprintf("%s, at or above %s", space, r.desc)
	}
	out = append(out, disk)

	inode := signal{typ: api.CondInodePressure, subject: subject, severity: sev, fields: fields}
	inodes := fmt.Sprintf("%s has %s inodes free of %s", subject, api.FormatCount(f.FilesFree), api.FormatCount(f.Files))
	switch {
	case f.Files == 0:
		inode.reason = "NoInodeLimit"
		inode.message = subject + " has no inode limit (f_files is 0); inode thresholds do not apply"
	case f.InodesBelowReclaim():
		inode.raw, inode.reason = true, "InodesBelowReclaimThreshold"
		inode.message = fmt.Sprintf("%s, below filesystem.reclaim_below_inodes %s", inodes, api.FormatCount(r.reclaimInodes))
	default:
		inode.reason = "InodesAboveReclaimThreshold"
		inode.message = fmt.Sprintf("%s, at or above filesystem.reclaim_below_inodes %s", inodes, api.FormatCount(r.reclaimInodes))
	}
	out = append(out, inode)

	out = append(out, fillingUp(f, warn, space, sev, fields))

	repl := signal{typ: api.CondReplaceRecommended, subject: subject, severity: sevCritical, fields: fields}
	switch {
	case f.BytesBelowReplace():
		repl.raw, repl.reason = true, "AvailBelowReplaceThreshold"
		repl.message = fmt.Sprintf("%s%s, below filesystem.replace_below %s: replace the sandbox", space, f.ReleasedClause(), api.FormatSize(r.replace))
	case f.InodesBelowReplace():
		repl.raw, repl.reason = true, "InodesBelowReplaceThreshold"
		repl.message = fmt.Sprintf("%s, below filesystem.replace_below_inodes %s: replace the sandbox", inodes, api.FormatCount(r.replaceInodes))
	case f.ReplaceMark != "":
		// The one verdict (api.Filesystem.Judge) is replace while reclaim's mark holds:
		// the condition says so from this sample's figures, not from the mark's moment.
		repl.raw, repl.reason = true, "MarkedByReclaim"
		repl.message = fmt.Sprintf("%s; reclaim cannot keep it healthy: %s: replace the sandbox", space, f.ReplaceMark)
		repl.fields = withMark(fields, f.ReplaceMark)
	default:
		repl.reason = "AboveReplaceThresholds"
		repl.message = fmt.Sprintf("%s, at or above filesystem.replace_below %s", space, api.FormatSize(r.replace))
	}
	out = append(out, repl)
	if f.SizeSetting != "" {
		for i := range out {
			out[i].message += api.SizedBy(f.SizeSetting)
		}
	}
	return out
}

// withMark is fields plus the mark's reason, for the event of a marked condition.
func withMark(fields map[string]any, mark string) map[string]any {
	out := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		out[k] = v
	}
	out["mark"] = mark
	return out
}

// fillingUp is DiskFillingUp: the predicted time to full is under warn_time_to_full. There
// is no static gate (it was: free space under twice the reclaim threshold, after
// node-mixin's avail/size < 40%): the prediction exists only when a window's trend is
// significant (growth), which is what keeps slow noise on a roomy disk from warning,
// and a gate kept a 1 GiB/s writer on a large disk quiet until the wall (issue 24).
func fillingUp(f api.Filesystem, warn time.Duration, space, sev string, fields map[string]any) signal {
	s := signal{typ: api.CondDiskFillingUp, subject: f.Path, severity: sev, fields: fields}
	pred := f.PredictedFullSeconds
	switch {
	case warn <= 0:
		s.reason, s.message = "PredictionDisabled", "filesystem.warn_time_to_full is 0"
	case pred == nil:
		s.reason = "NotFilling"
		s.message = fmt.Sprintf("%s and is not filling", space)
	case *pred >= warn.Seconds():
		s.reason = "FullLaterThanWarnTime"
		s.message = fmt.Sprintf("%s, filling at %s/s over the last %s: full in %s, later than filesystem.warn_time_to_full %s",
			space, api.FormatSize(uint64(f.GrowthBytesPerSecond)), shortDuration(f.GrowthWindow.D()), api.FormatSeconds(*pred), shortDuration(warn))
	default:
		s.raw, s.reason = true, "PredictedFull"
		s.message = fmt.Sprintf("%s, filling at %s/s over the last %s: full in %s, under filesystem.warn_time_to_full %s",
			space, api.FormatSize(uint64(f.GrowthBytesPerSecond)), shortDuration(f.GrowthWindow.D()), api.FormatSeconds(*pred), shortDuration(warn))
	}
	return s
}

// percent renders a ratio as a whole percent, rounded down so that 100% means full.
func percent(r float64) int {
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	return int(math.Min(r, 1) * 100)
}
