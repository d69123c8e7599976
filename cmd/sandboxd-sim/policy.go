package main

import (
	"time"

	"github.com/sandboxd/sandboxd/internal/units"
)

// Kinds of policy.
const (
	kindNone     = iota // nothing reclaims, nothing warns
	kindStatic          // the write-up's fix: a check at resume, launcher files pruned by age
	kindSandboxd        // sandboxd: the backtest engine (real pressure and reclaim-decision code)
)

// Policy is one row of docs/policy.md.
type Policy struct {
	Name string
	Kind int
	// The write-up's static policy: at resume, below StaticReclaim free run its reclaim
	// (store gc, the download caches, the build cache, launcher files past SiteMaxAge);
	// still below StaticReplace: replace. Launcher files past SiteMaxAge are also pruned
	// at every launch.
	StaticReclaim, StaticReplace int64

	// sandboxd's [[filesystem]] and [reclaim] settings.
	ReclaimBelow, ReplaceBelow units.Threshold
	Headroom                   int64
	LeadTime, WarnTimeToFull   time.Duration
	Reserve                    int64
	Cooldown                   time.Duration
	// Thrash: CacheThrashing is in force (a cache refilled after its last 3 prunes goes
	// last in the ladder).
	Thrash bool
}

func bytesT(s string) units.Threshold {
	t, err := units.ParseBytesThreshold(s)
	if err != nil {
		panic(err) // the table's own constants
	}
	return t
}

// sandboxdPolicy is sandboxd's policy with the defaults the table chose
// (internal/config/default.toml); variants change one setting each.
func sandboxdPolicy(name string) Policy {
	return Policy{Name: name, Kind: kindSandboxd,
		ReclaimBelow: bytesT("1.5GiB"), ReplaceBelow: bytesT("256MiB"), Headroom: 256 * mib,
		LeadTime: 10 * time.Minute, WarnTimeToFull: time.Hour, Reserve: 256 * mib, Cooldown: 10 * time.Minute,
		Thrash: true}
}

// Policies are the rows of docs/policy.md, in order.
func Policies() []Policy {
	with := func(name string, f func(*Policy)) Policy {
		p := sandboxdPolicy(name)
		f(&p)
		return p
	}
	// The order is the rows' numbers, which default.toml's comments cite: add new rows
	// at the end.
	return []Policy{
		{Name: "none", Kind: kindNone},
		{Name: "write-up: static at resume (1.5 GiB / 512 MiB)", Kind: kindStatic, StaticReclaim: 1536 * mib, StaticReplace: 512 * mib},
		sandboxdPolicy("sandboxd defaults (default.toml)"),
		with("defaults without CacheThrashing", func(p *Policy) { p.Thrash = false }),
		with("replace_below 512MiB (v1.1 default)", func(p *Policy) { p.ReplaceBelow = bytesT("512MiB") }),
		with("reclaim_below 1GiB", func(p *Policy) { p.ReclaimBelow = bytesT("1GiB") }),
		with("reclaim_below 2.5GiB", func(p *Policy) { p.ReclaimBelow = bytesT("2.5GiB") }),
		with("reclaim_below 10%", func(p *Policy) { p.ReclaimBelow = bytesT("10%") }),
		with("reclaim_below 15%", func(p *Policy) { p.ReclaimBelow = bytesT("15%") }),
		with("replace_below 5%", func(p *Policy) { p.ReplaceBelow = bytesT("5%") }),
		with("headroom 1GiB", func(p *Policy) { p.Headroom = 1 << 30 }),
		with("lead_time 0 (static threshold only)", func(p *Policy) { p.LeadTime = 0 }),
		with("lead_time 30m", func(p *Policy) { p.LeadTime = 30 * time.Minute }),
		with("warn_time_to_full 4h", func(p *Policy) { p.WarnTimeToFull = 4 * time.Hour }),
		with("reserve 0", func(p *Policy) { p.Reserve = 0 }),
	}
}
