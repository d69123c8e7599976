package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Row is one policy's figures over the fleet (a row of docs/policy.md).
type Row struct {
	Policy          string
	Sandboxes       int
	EverFullPct     float64 // % of sandboxes that ever hit 100%
	EnospcMinutes   float64 // active minutes at 100%, the fleet's total
	Failed          float64 // commands that ran at 100%, the fleet's total
	FailedPct       float64 // ... as a share of all commands
	ReclaimsPerDay  float64 // ladder runs per sandbox-day
	RedownloadGiB   float64 // bytes the download caches fetched again after prunes
	RedownloadLBGiB float64 // ... of which by the load-bearing users
	Replaces        int     // replace verdicts (starts of a replace episode)
	ReplacesNeeded  int     // ... followed by 100% within Params.NeededWithin
	FullEpisodes    int
	Warned          int // full episodes with a warning up before them
	// LeadMedian and LeadP5: how long a warning (DiskFillingUp, DiskPressure or
	// ReplaceRecommended) had been up when the disk reached 100%, over each sandbox's
	// first full episode (0: none was up), so a sandbox that fills again and again does
	// not outweigh the others.
	LeadMedian, LeadP5 time.Duration
	FillingUpPerDay    float64 // DiskFillingUp raises per sandbox-day
	Thrashing          int     // sandboxes whose store or download cache was CacheThrashing at some point
	ThrashingLB        int     // ... of them load-bearing users
	LoadBearing        int
	engine             bool // the policy warns (sandboxd's): lead times apply
}

// score folds the sandboxes' results under one policy into its row.
func score(p Params, pol Policy, rs []result) Row {
	row := Row{Policy: pol.Name, Sandboxes: len(rs)}
	var commands float64
	var leads []time.Duration
	full := 0
	for _, r := range rs {
		if r.everFull {
			full++
		}
		row.EnospcMinutes += r.enospcMinutes
		row.Failed += r.failed
		commands += r.commands
		row.ReclaimsPerDay += float64(r.reclaims)
		row.RedownloadGiB += float64(r.redownloaded) / gib
		if r.loadBearing {
			row.RedownloadLBGiB += float64(r.redownloaded) / gib
			row.LoadBearing++
		}
		if r.thrashSeen {
			row.Thrashing++
			if r.loadBearing {
				row.ThrashingLB++
			}
		}
		row.FillingUpPerDay += float64(r.fillingUp)
		row.Replaces += len(r.replaces)
		for _, v := range r.replaces {
			if needed(v, r.fulls, p.NeededWithin) {
				row.ReplacesNeeded++
			}
		}
		row.FullEpisodes += len(r.fulls)
		for _, l := range r.leads {
			if l > 0 {
				row.Warned++
			}
		}
		if len(r.leads) > 0 {
			leads = append(leads, r.leads[0])
		}
	}
	if len(rs) > 0 {
		row.EverFullPct = 100 * float64(full) / float64(len(rs))
		row.ReclaimsPerDay /= float64(len(rs) * p.Days)
		row.FillingUpPerDay /= float64(len(rs) * p.Days)
	}
	if commands > 0 {
		row.FailedPct = 100 * row.Failed / commands
	}
	if pol.Kind == kindSandboxd {
		row.engine = true
		row.LeadMedian, row.LeadP5 = quantile(leads, 0.5), quantile(leads, 0.05)
	}
	return row
}

// needed reports whether a full episode started within `within` after the verdict at v.
func needed(v time.Time, fulls []time.Time, within time.Duration) bool {
	for _, f := range fulls {
		if !f.Before(v) && f.Sub(v) <= within {
			return true
		}
	}
	return false
}

// quantile is the q-quantile (nearest rank) of ds; 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// table renders the rows as docs/policy.md's markdown table, numbered for the comments
// in default.toml to point at.
func table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| # | policy | ever at 100% | ENOSPC-minutes | failed commands | reclaims / sandbox-day | re-downloaded (load-bearing users) | replace verdicts (needed) | full episodes (warned) | warning lead time median (p5) | DiskFillingUp / sandbox-day |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rows {
		lead, fu := "— (no warnings)", "—"
		if r.engine && r.FullEpisodes > 0 {
			lead = fmt.Sprintf("%s (%s)", dur(r.LeadMedian), dur(r.LeadP5))
		} else if r.engine {
			lead = "— (never full)"
		}
		if r.engine {
			fu = fmt.Sprintf("%.3f", r.FillingUpPerDay)
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f%% | %s | %s (%.2f%%) | %.2f | %s GiB (%s GiB) | %s (%s) | %s (%s) | %s | %s |\n",
			i+1, r.Policy, r.EverFullPct, count(r.EnospcMinutes), count(r.Failed), r.FailedPct, r.ReclaimsPerDay,
			count(r.RedownloadGiB), count(r.RedownloadLBGiB), count(float64(r.Replaces)), count(float64(r.ReplacesNeeded)),
			count(float64(r.FullEpisodes)), count(float64(r.Warned)), lead, fu)
	}
	return b.String()
}

func count(f float64) string {
	n := int64(f + 0.5)
	s := fmt.Sprint(n)
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	return string(out)
}

// dur is a duration for the table: 0, 45s, 12m, 3.5h, 2.1d.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}
