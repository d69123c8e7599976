package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func statusCommand() *command {
	return &command{name: "status", summary: "a person's view of filesystems, sites, caches, mounts and conditions",
		globals: gClient, run: runStatus}
}

func runStatus(ctx context.Context, inv *invocation) int {
	st, err := inv.client().Status(ctx)
	if err != nil {
		return failure(err, inv, inv.disks())
	}
	if inv.g.json {
		printJSON(inv.stdout, st)
		return exitOK
	}
	printStatus(inv.stdout, st, time.Now())
	return exitOK
}

// statusSections are the parts of `sandboxd status`, in order. Each is one function that
// prints its heading and lines, or nothing when it has nothing to say; a capability that
// adds state to /v1/status (jobs, runtime mounts) adds its section here.
var statusSections = []func(w io.Writer, st *api.Status, now time.Time){
	statusHeader,
	statusFilesystems,
	statusSites,
	statusCaches,
	statusMounts,
	statusJobs,
	statusConditions,
	statusLastReclaim,
}

func printStatus(w io.Writer, st *api.Status, now time.Time) {
	for _, section := range statusSections {
		section(w, st, now)
	}
}

const barWidth = 30

// bar renders a usage bar: [##########..........] with # for the used share.
func bar(ratio float64) string {
	if math.IsNaN(ratio) || ratio < 0 {
		ratio = 0
	}
	n := int(math.Round(min(ratio, 1) * barWidth))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", barWidth-n) + "]"
}

// ago renders an instant as how long before now it was: "4m10s ago".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	// A duration holds 292 years at most, and t.Sub saturates there (it would read
	// "in 2562047h47m"): beyond a century, the date says more than any count of hours.
	if far := now.AddDate(100, 0, 0); t.After(far) {
		return "in more than 100 years (" + t.UTC().Format("2006-01-02") + ")"
	}
	if long := now.AddDate(-100, 0, 0); t.Before(long) {
		return "more than 100 years ago (" + t.UTC().Format("2006-01-02") + ")"
	}
	if d := now.Sub(t); d >= 0 {
		return api.FormatDuration(d) + " ago"
	}
	return "in " + api.FormatDuration(t.Sub(now))
}

func count[T int64 | uint64 | int](n T) string { return api.FormatCount(uint64(max(n, 0))) }

func size[T int64 | uint64](n T) string { return api.FormatSize(uint64(max(n, 0))) }

func statusHeader(w io.Writer, st *api.Status, now time.Time) {
	mode := st.Mode
	if mode == api.ModeObserve {
		mode += " (computes and reports, changes nothing)"
	}
	fmt.Fprintf(w, "sandboxd %s  mode %s  api v%d\n", st.Version, mode, st.APIVersion)
	if st.Offline {
		fmt.Fprintln(w, "offline: caches only a download refills are kept at their own gc (reclaim.offline)")
	}
	if !st.State.Persistent {
		fmt.Fprintf(w, "state: in memory only (%s)\n", st.State.Error)
	}
}

func statusFilesystems(w io.Writer, st *api.Status, now time.Time) {
	fmt.Fprintln(w, "\nFILESYSTEMS")
	for _, f := range st.Filesystems {
		if f.SampledAt.IsZero() && f.Error == "" {
			// Before the first statfs answer there are no figures: zeros would read as
			// an empty disk of size 0.
			why := ""
			if f.Stale {
				why = ": statfs is not answering"
			}
			fmt.Fprintf(w, "  %-20s not sampled yet%s\n", f.Path, why)
			continue
		}
		verdict := ""
		if v := f.Judge(); v != "" {
			verdict = "  verdict " + v
		}
		fmt.Fprintf(w, "  %-20s %s %3.0f%% used  %s of %s free%s\n", f.Path, bar(f.UsedRatio), f.UsedRatio*100,
			size(f.AvailBytes), size(f.SizeBytes), verdict)
		inodes := "no inode limit"
		if f.Files > 0 {
			inodes = fmt.Sprintf("%s of %s inodes free", count(f.FilesFree), count(f.Files))
		}
		growth := "not filling"
		if f.GrowthBytesPerSecond > 0 {
			growth = fmt.Sprintf("growing %s/s", size(uint64(f.GrowthBytesPerSecond)))
		}
		full := ""
		if f.PredictedFullSeconds != nil {
			full = ", full in " + api.FormatSeconds(*f.PredictedFullSeconds)
		}
		fmt.Fprintf(w, "  %-20s %s; %s%s\n", "", inodes, growth, full)
		fmt.Fprintf(w, "  %-20s %s %s, reclaim below %s, replace below %s\n", "", f.FSType, f.Mountpoint,
			size(f.ReclaimThresholdBytes), size(f.ReplaceThresholdBytes))
		if f.SizeSetting != "" {
			fmt.Fprintf(w, "  %-20s this disk is sized by %s\n", "", f.SizeSetting)
		}
		if f.ReplaceMark != "" {
			fmt.Fprintf(w, "  %-20s replace: %s\n", "", f.ReplaceMark)
		}
		if f.Stale {
			fmt.Fprintf(w, "  %-20s STALE: statfs is not answering; figures are from %s\n", "", ago(f.SampledAt, now))
		} else if f.Error != "" {
			fmt.Fprintf(w, "  %-20s UNAVAILABLE: %s\n", "", f.UnavailableDetail())
		}
	}
}

func statusSites(w io.Writer, st *api.Status, now time.Time) {
	if len(st.Sites) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSITES")
	for _, s := range st.Sites {
		oldest := "empty"
		if s.Files > 0 {
			oldest = "oldest " + api.FormatSeconds(s.OldestAgeSeconds)
		}
		fmt.Fprintf(w, "  %-12s %s  %s files, %s, %s jobs (%s running), %s\n", s.Name, s.Path,
			count(s.Files), size(s.Bytes), count(s.Jobs), count(s.RunningJobs), oldest)
		pruned := "never pruned"
		if s.LastPruneAt != nil {
			pruned = "last prune " + ago(*s.LastPruneAt, now)
		}
		fmt.Fprintf(w, "  %-12s max age %s; %s pending prune, %s pruned, %s\n", "", api.FormatSeconds(s.MaxAgeSeconds),
			count(s.PendingPrune), count(s.PrunedTotal), pruned)
		if s.Problem != nil {
			fmt.Fprintf(w, "  %-12s PROBLEM: %s\n", "", *s.Problem)
		}
	}
}

// statusCaches lists the cache roots reclaim knows: declared ones and those it found.
func statusCaches(w io.Writer, st *api.Status, now time.Time) {
	if len(st.Caches) == 0 {
		return
	}
	fmt.Fprintln(w, "\nCACHES (reclaim ladder order)")
	for _, c := range st.Caches {
		sz := "size not measured yet"
		if c.SizedAt != nil {
			at := ""
			if c.Partial {
				at = "at least "
			}
			sz = fmt.Sprintf("%s%s in %s files, measured %s", at, size(c.EstimatedBytes), count(c.EstimatedFiles), ago(*c.SizedAt, now))
		}
		origin := "found"
		if c.Declared {
			origin = "declared"
		}
		fmt.Fprintf(w, "  %-14s %-8s %s\n", c.Name, c.Kind, c.Path)
		fmt.Fprintf(w, "  %-14s %-8s %s; %s, ladder %s\n", "", "", sz, origin, c.Ladder)
		if c.Problem != "" {
			fmt.Fprintf(w, "  %-14s %-8s PROBLEM: %s\n", "", "", c.Problem)
		}
	}
}

func statusMounts(w io.Writer, st *api.Status, now time.Time) {
	if len(st.Mounts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nMOUNTS")
	printMountLines(w, st.Mounts, now)
}

func statusConditions(w io.Writer, st *api.Status, now time.Time) {
	fmt.Fprintln(w, "\nCONDITIONS")
	active := 0
	for _, c := range st.Conditions {
		if !c.Status {
			continue
		}
		active++
		fmt.Fprintf(w, "  %-8s %s(%s) since %s: %s\n", strings.ToUpper(c.Severity), c.Type, c.Subject,
			ago(c.Since, now), c.Message)
	}
	if active == 0 {
		fmt.Fprintln(w, "  none active")
	}
}

func statusLastReclaim(w io.Writer, st *api.Status, now time.Time) {
	if st.Reclaim == nil {
		return
	}
	r := st.Reclaim
	fmt.Fprintf(w, "\nLAST RECLAIM  %s (%s) %s: freed %s, %s files\n", r.Verdict, r.Trigger,
		ago(r.FinishedAt, now), size(r.FreedBytes), count(r.FreedFiles))
}
