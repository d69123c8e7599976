package reclaim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// fingerprint is the run's detail line (CONTRACT §3): the filesystem with its free bytes,
// size, percent used and free inodes; what was reclaimed and how much it freed; and the
// threshold involved with its value and config key. A dry run or an observe-mode run
// says "would" and names its projected figures as projected (issue 10).
func (r *Reclaimer) fingerprint(run *api.ReclaimRun, f *fsRun) string {
	m := f.now()
	parts := []string{m.Fingerprint()}
	if len(run.Actions) > 0 || run.Verdict != api.VerdictHealthy {
		parts = append(parts, describeFreed(run, f.simulate, f.held != ""))
	}
	if f.held != "" && !f.satisfied() {
		parts = append(parts, f.heldClause())
	}
	if kept := keptOfflineNames(run); kept != "" {
		parts = append(parts, "kept "+kept+" (reclaim.offline: only a download refills them)")
	}
	p := f.cur // the projection of a simulated run, what is on disk otherwise
	switch {
	case m.ReplaceMark != "" && !m.BelowReplace():
		parts = append(parts, "replace the sandbox: "+m.ReplaceMark)
	case f.preview:
		parts = append(parts, fmt.Sprintf("%s: nothing needed; if it were, the above is what would go first", aboveThresholds(m)))
	case f.simulate && f.satisfied():
		parts = append(parts, fmt.Sprintf("would then have %s free (projected), at or above %s", api.FormatSize(p.AvailBytes), f.targetDesc()))
	case f.simulate:
		s := fmt.Sprintf("would then have %s free (projected), still short of %s", api.FormatSize(p.AvailBytes), f.targetDesc())
		if p.BelowReplace() {
			s += "; the data left is not regenerable, replace the sandbox"
		}
		parts = append(parts, s)
	case run.Verdict == api.VerdictHealthy:
		parts = append(parts, aboveThresholds(m)+": nothing to reclaim")
	case m.BelowReplace():
		var why []string
		if m.WorkloadAvail() < m.ReplaceThresholdBytes {
			why = append(why, "filesystem.replace_below ("+api.FormatSize(m.ReplaceThresholdBytes)+")")
		}
		if m.Files > 0 && m.FilesFree < m.ReplaceThresholdFiles {
			why = append(why, "filesystem.replace_below_inodes ("+api.FormatCount(m.ReplaceThresholdFiles)+" inodes)")
		}
		parts = append(parts, "still below "+strings.Join(why, " and ")+" after reclaim: the data left is not regenerable, replace the sandbox")
	case f.satisfied():
		parts = append(parts, "back at or above "+f.targetDesc())
	default:
		parts = append(parts, fmt.Sprintf("still short of %s but above filesystem.replace_below (%s)", f.targetDesc(), api.FormatSize(m.ReplaceThresholdBytes)))
	}
	if note := inUseNote(f); note != "" && !f.preview && run.Verdict != api.VerdictHealthy {
		parts = append(parts, note)
	}
	switch {
	case run.DryRun:
		parts = append(parts, "dry run: nothing was changed")
	case f.simulate:
		parts = append(parts, "observe mode: nothing was changed")
	}
	return strings.Join(parts, "; ")
}

// aboveThresholds is "above filesystem.reclaim_below 1.5 GiB and filesystem.reclaim_below_inodes (…)"
// (or the adaptive threshold, named as such: api.Filesystem.ReclaimThresholdName).
func aboveThresholds(m api.Filesystem) string {
	s := "above " + m.ReclaimThresholdName()
	if m.Files > 0 {
		s += " and filesystem.reclaim_below_inodes (" + api.FormatCount(m.ReclaimThresholdFiles) + " inodes)"
	}
	return s
}

// targetDesc names where the ladder stops, by what set it: target_free, the call's need,
// or the reclaim threshold plus headroom.
func (f *fsRun) targetDesc() string {
	t := api.FormatSize(f.targetBytes)
	switch {
	case f.targetFree:
		return "the target " + t + " free (target_free)"
	case f.needBytes == f.targetBytes && f.needBytes > 0:
		return t + " free, what the call needs"
	}
	s := fmt.Sprintf("the target %s free (%s plus reclaim.headroom", t, f.cur.ReclaimThresholdName())
	if f.headroomCapped {
		s += fmt.Sprintf(" capped at %s, a quarter of the filesystem's %s", api.FormatSize(f.headroom), api.FormatSize(f.cur.SizeBytes))
	}
	if f.rearm > 0 {
		s += fmt.Sprintf(" plus the %s reserve to re-arm", api.FormatSize(f.rearm))
	}
	if f.cur.SizeBytes > 0 && f.targetBytes == f.cur.SizeBytes {
		s += fmt.Sprintf(", cut to the filesystem's size %s", api.FormatSize(f.cur.SizeBytes))
	}
	return s + ")"
}

// describeFreed names what the run reclaimed, largest source first, and the total: for a
// simulated run what it would reclaim, by the actions' estimates.
func describeFreed(run *api.ReclaimRun, simulated, held bool) string {
	verb := "reclaimed"
	totalB, totalF := run.FreedBytes, run.FreedFiles
	if simulated {
		verb = "would reclaim"
		totalB, totalF = 0, 0
		for _, a := range run.Actions {
			if a.Status == api.ActionPlanned || a.Status == api.ActionObserved {
				totalB += max(a.FreedBytes, 0)
				totalF += max(a.FreedFiles, 0)
			}
		}
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
	switch {
	case len(list) == 0 && held:
		// The cooldown held the expensive rungs: the caches may well hold space, and the
		// held clause says how much and from when.
		return "nothing cheap was left to reclaim (expired site entries, cache entries past reclaim.min_age)"
	case len(list) == 0:
		return "nothing reclaimable was found (no cache or expired site entry on it)"
	}
	s := fmt.Sprintf("%s %s and %s inodes (%s)", verb, api.FormatSize(uint64(totalB)), api.FormatCount(uint64(totalF)), strings.Join(names, ", "))
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
