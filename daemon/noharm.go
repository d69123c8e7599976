package daemon

import (
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/reclaim"
	"github.com/sandboxd/sandboxd/retention"
)

// siteUsage is what every site holds, an upper bound of ladder rung 1.
func siteUsage(sites *retention.Manager) (bytes, files int64) {
	for _, s := range sites.Snapshot() {
		bytes += max(s.Bytes, 0)
		files += max(s.Files, 0)
	}
	return bytes, files
}

// reclaimNote is what a launch's detail says of the reclaim it ran: what it freed, or in
// observe mode what it would have freed — never "freed" for what was not deleted.
func reclaimNote(run api.ReclaimRun) string {
	if len(run.Projected) == 0 {
		// The run's own detail, not its verdict word: the launch says the filesystem's
		// one verdict itself (a second word here read "ok ... (verdict replace)").
		s := fmt.Sprintf("reclaim freed %s and %s files", api.FormatSize(uint64(max(run.FreedBytes, 0))), api.FormatCount(uint64(max(run.FreedFiles, 0))))
		if run.FreedBytes == 0 && run.FreedFiles == 0 && run.Detail != "" {
			s += " (" + runWhy(run.Detail) + ")"
		}
		if note := reclaim.InUseNote(run); note != "" {
			s += "; " + note // a thrashing cache: grow the disk rather than prune it again
		}
		return s
	}
	var b, n int64
	for i, p := range run.Projected {
		if i < len(run.Before) {
			b += int64(p.AvailBytes) - int64(run.Before[i].AvailBytes)
			n += int64(p.FilesFree) - int64(run.Before[i].FilesFree)
		}
	}
	return fmt.Sprintf("reclaim would free %s and %s files (observe mode: nothing was deleted)",
		api.FormatSize(uint64(max(b, 0))), api.FormatCount(uint64(max(n, 0))))
}

// runWhy is the part of a run's detail after its filesystem fingerprint: what it found and
// why it stopped ("nothing cheap was left ...; cooldown until 15:04:05, 38.0 MiB
// reclaimable then ...").
func runWhy(detail string) string {
	if i := strings.Index(detail, "; "); i >= 0 {
		return detail[i+2:]
	}
	return detail
}
