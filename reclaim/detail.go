package reclaim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// fingerprint is the run's detail line (CONTRACT §3): the filesystem with its free bytes,
// size, percent used and free inodes; what was reclaimed and how much it freed; and the
// threshold involved with its value and config key.
func (r *Reclaimer) fingerprint(run *api.ReclaimRun, f *fsRun) string {
	parts := []string{f.cur.Fingerprint()}
	if len(run.Actions) > 0 || run.Verdict != api.VerdictHealthy {
		parts = append(parts, describeFreed(run))
	}
	if kept := keptOfflineNames(run); kept != "" {
		parts = append(parts, "kept "+kept+" (reclaim.offline: only a download refills them)")
	}
	m := f.cur
	switch {
	case run.Verdict == api.VerdictHealthy:
		s := "above filesystem.reclaim_below (" + api.FormatSize(m.ReclaimThresholdBytes) + ")"
		if m.Files > 0 {
			s += " and filesystem.reclaim_below_inodes (" + api.FormatCount(m.ReclaimThresholdFiles) + " inodes)"
		}
		parts = append(parts, s+": nothing to reclaim")
	case f.blocked != "":
		parts = append(parts, fmt.Sprintf("below filesystem.reclaim_below (%s) again but %s: replace the sandbox", api.FormatSize(m.ReclaimThresholdBytes), f.blocked))
	case f.belowReplace:
		var why []string
		if m.AvailBytes < m.ReplaceThresholdBytes {
			why = append(why, "filesystem.replace_below ("+api.FormatSize(m.ReplaceThresholdBytes)+")")
		}
		if m.Files > 0 && m.FilesFree < m.ReplaceThresholdFiles {
			why = append(why, "filesystem.replace_below_inodes ("+api.FormatCount(m.ReplaceThresholdFiles)+" inodes)")
		}
		parts = append(parts, "still below "+strings.Join(why, " and ")+" after reclaim: the data left is not regenerable, replace the sandbox")
	case f.satisfied():
		parts = append(parts, fmt.Sprintf("back above filesystem.reclaim_below (%s) plus reclaim.headroom", api.FormatSize(m.ReclaimThresholdBytes)))
	default:
		parts = append(parts, fmt.Sprintf("still short of the target %s free (filesystem.reclaim_below %s plus reclaim.headroom) but above filesystem.replace_below (%s)",
			api.FormatSize(f.targetBytes), api.FormatSize(m.ReclaimThresholdBytes), api.FormatSize(m.ReplaceThresholdBytes)))
	}
	if run.DryRun {
		parts = append(parts, "dry run: nothing was changed")
	}
	return strings.Join(parts, "; ")
}

// describeFreed names what the run reclaimed, largest source first, and the total.
func describeFreed(run *api.ReclaimRun) string {
	verb := "reclaimed"
	if run.DryRun || len(run.Actions) > 0 && run.Actions[0].Status == api.ActionObserved {
		verb = "would reclaim"
	}
	type src struct {
		name  string
		bytes int64
		files int64
	}
	by := map[string]*src{}
	var failed []string
	for _, a := range run.Actions {
		if a.Status == api.ActionFailed {
			failed = append(failed, a.Source)
		}
		if a.Status == api.ActionSkipped || a.Status == api.ActionFailed {
			continue
		}
		s := by[a.Source]
		if s == nil {
			s = &src{name: a.Source}
			by[a.Source] = s
		}
		s.bytes += max(a.FreedBytes, 0)
		s.files += max(a.FreedFiles, 0)
	}
	var list []*src
	for _, s := range by {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool {
		return list[i].bytes > list[j].bytes || list[i].bytes == list[j].bytes && list[i].name < list[j].name
	})
	var names []string
	for i, s := range list {
		if i == 5 {
			names = append(names, fmt.Sprintf("%d more", len(list)-5))
			break
		}
		names = append(names, fmt.Sprintf("%s %s/%s files", s.name, api.FormatSize(uint64(s.bytes)), api.FormatCount(uint64(s.files))))
	}
	if len(list) == 0 {
		return "nothing reclaimable was found (no cache or expired site entry on it)"
	}
	s := fmt.Sprintf("%s %s and %s inodes (%s)", verb, api.FormatSize(uint64(run.FreedBytes)), api.FormatCount(uint64(run.FreedFiles)), strings.Join(names, ", "))
	if len(failed) > 0 {
		s += "; failed: " + strings.Join(failed, ", ")
	}
	return s
}

// keptOfflineNames lists, once each, the caches the run kept because reclaim.offline is set.
func keptOfflineNames(run *api.ReclaimRun) string {
	var names []string
	seen := map[string]bool{}
	for _, a := range run.Actions {
		if a.Error == offlineKept && !seen[a.Source] {
			seen[a.Source] = true
			names = append(names, a.Source)
		}
	}
	return strings.Join(names, ", ")
}
