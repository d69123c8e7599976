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
		return failure(err, inv, "/")
	}
	if inv.g.json {
		printJSON(inv.stdout, st)
		return exitOK
	}
	printStatus(inv.stdout, st)
	return exitOK
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

func humanDuration(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	case d >= time.Minute:
		return fmt.Sprintf("%.0f min", d.Minutes())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func printStatus(w io.Writer, st *api.Status) {
	mode := st.Mode
	if mode == api.ModeObserve {
		mode += " (computes and reports, changes nothing)"
	}
	fmt.Fprintf(w, "sandboxd %s  mode %s  api v%d\n", st.Version, mode, st.APIVersion)
	if !st.State.Persistent {
		fmt.Fprintf(w, "state: in memory only (%s)\n", st.State.Error)
	}
	fmt.Fprintln(w, "\nFILESYSTEMS")
	for _, f := range st.Filesystems {
		fmt.Fprintf(w, "  %-20s %s %3.0f%% used  %s of %s free\n", f.Path, bar(f.UsedRatio), f.UsedRatio*100,
			api.FormatSize(f.AvailBytes), api.FormatSize(f.SizeBytes))
		inodes := "no inode limit"
		if f.Files > 0 {
			inodes = fmt.Sprintf("%s of %s inodes free", api.FormatCount(f.FilesFree), api.FormatCount(f.Files))
		}
		growth := "not filling"
		if f.GrowthBytesPerSecond > 0 {
			growth = fmt.Sprintf("growing %s/s", api.FormatSize(uint64(f.GrowthBytesPerSecond)))
		}
		full := ""
		if f.PredictedFullSeconds != nil {
			full = ", full in " + humanDuration(*f.PredictedFullSeconds)
		}
		fmt.Fprintf(w, "  %-20s %s; %s%s\n", "", inodes, growth, full)
		fmt.Fprintf(w, "  %-20s %s %s, reclaim below %s, replace below %s\n", "", f.FSType, f.Mountpoint,
			api.FormatSize(f.ReclaimThresholdBytes), api.FormatSize(f.ReplaceThresholdBytes))
		if f.Stale {
			fmt.Fprintf(w, "  %-20s STALE: statfs is not answering; figures are from %s\n", "", f.SampledAt.Format(time.RFC3339))
		}
	}
	if len(st.Sites) > 0 {
		fmt.Fprintln(w, "\nSITES")
		for _, s := range st.Sites {
			fmt.Fprintf(w, "  %-12s %s  %s files, %s, %d jobs (%d running), oldest %s, %d pending prune, %d pruned\n",
				s.Name, s.Path, api.FormatCount(uint64(max(s.Files, 0))), api.FormatSize(uint64(max(s.Bytes, 0))), s.Jobs, s.RunningJobs,
				humanDuration(s.OldestAgeSeconds), s.PendingPrune, s.PrunedTotal)
			if s.Problem != nil {
				fmt.Fprintf(w, "  %-12s PROBLEM: %s\n", "", *s.Problem)
			}
		}
	}
	if len(st.Mounts) > 0 {
		fmt.Fprintln(w, "\nMOUNTS")
		for _, m := range st.Mounts {
			req := ""
			if m.Required {
				req = " (required)"
			}
			errno := ""
			if m.Errno != "" {
				errno = " " + m.Errno
			}
			fmt.Fprintf(w, "  %-12s %s %s%s%s since %s, %d remounts\n", m.Name, m.Path, strings.ToUpper(m.State), errno,
				req, m.Since.Format(time.RFC3339), m.RemountsTotal)
		}
	}
	fmt.Fprintln(w, "\nCONDITIONS")
	active := 0
	for _, c := range st.Conditions {
		if !c.Status {
			continue
		}
		active++
		fmt.Fprintf(w, "  %-8s %s(%s) since %s: %s\n", strings.ToUpper(c.Severity), c.Type, c.Subject,
			c.Since.Format(time.RFC3339), c.Message)
	}
	if active == 0 {
		fmt.Fprintln(w, "  none active")
	}
	if st.Reclaim != nil {
		fmt.Fprintf(w, "\nLAST RECLAIM  %s (%s) at %s: freed %s, %d files\n", st.Reclaim.Verdict, st.Reclaim.Trigger,
			st.Reclaim.FinishedAt.Format(time.RFC3339), api.FormatSize(uint64(max(st.Reclaim.FreedBytes, 0))), st.Reclaim.FreedFiles)
	}
}
