package main

import "time"

// Params is every figure of the simulated fleet, in one place (issue 28). Ranges [lo, hi]
// are drawn per sandbox (or per event) log-uniformly when marked "log", else uniformly.
// The figures come from the write-up that started sandboxd (../shared/FIELD-NOTES.md,
// "Where sandboxd comes from"): an 11 GiB root holding a 4.8 GiB pnpm store, a 1.2 GiB
// checkout and 16,381 stale launcher files of ~7 files per command.
type Params struct {
	Sandboxes int           // the fleet
	Days      int           // simulated days per sandbox
	Step      time.Duration // sampling step while a sandbox runs (the engine's sample interval)

	// Disk sizes in GiB and their weights: 4 to 64 GiB, 11 GiB the most common.
	SizesGiB    []float64
	SizeWeights []float64
	// WorkloadExponent scales the caches' ceilings, the user data's growth and the
	// checkouts by (size / 11 GiB)^WorkloadExponent: whoever picked a 4 GiB disk runs a
	// lighter workload than whoever picked 64 GiB (0: every sandbox the same workload).
	WorkloadExponent float64

	// System: the OS image and toolchains, never freed (GiB).
	SystemGiB [2]float64
	// User data that only grows: what a sandbox starts with (GiB) and what each active
	// hour adds (MiB, log).
	UserStartGiB   [2]float64
	UserMiBPerHour [2]float64
	// Checkouts of 0.2–2 GiB each (log): how many a sandbox starts with, and the chance
	// per active hour of one more (a new repository cloned).
	CheckoutGiB        [2]float64
	CheckoutsAtStart   [2]int
	NewCheckoutPerHour float64

	// The package store (pnpm/npm/pip): new packages arrive at MiB per active hour (log)
	// until all the user will ever use, its ceiling (GiB, ~5), has been downloaded once;
	// what a prune removes comes back only by a refill (below). StoreUnreferenced is the
	// share its own gc (`pnpm store prune`, ladder rung 2) frees. PkgCache is the tools'
	// download caches (npm _cacache, pip http): same shape, smaller.
	StoreCeilGiB       [2]float64
	StoreMiBPerHour    [2]float64
	StoreUnreferenced  float64
	PkgCacheCeilGiB    [2]float64
	PkgCacheMiBPerHour [2]float64
	// Build churn: a build writes its outputs (MiB, log) in the checkout and then deletes
	// the previous build's (net zero over time, a sawtooth); BuildsPerHour while active.
	// BuildCache (go-build, ccache) grows towards its ceiling and is regenerable.
	BuildOutputMiB       [2]float64
	BuildsPerHour        float64
	BuildCacheCeilGiB    [2]float64
	BuildCacheMiBPerHour [2]float64

	// Bookkeeping: FilesPerCommand small files of BytesPerFile per command in the
	// launcher's temp dir, at CommandsPerDay (log) spread over the active time.
	CommandsPerDay  [2]float64
	FilesPerCommand int
	BytesPerFile    int64
	// SiteMaxAge: a site's files older than this are pruned (sandboxd's [[site]] max_age;
	// the write-up's "older than 12 h on every launch").
	SiteMaxAge time.Duration

	// A runaway fill (`yes > fill`): RunawayPerMonth is the chance a sandbox has one in a
	// month (each sandbox at most one per week of its life); it writes RunawayMiBps (log)
	// until killed after RunawayMinutes (log) or the disk is full; the agent deletes the
	// file at the session's end with RunawayCleanedUp.
	RunawayPerMonth  float64
	RunawayMiBps     [2]float64
	RunawayMinutes   [2]float64
	RunawayCleanedUp float64

	// Resumes at turn boundaries: the gap between sessions (minutes, log: 5 minutes to 2
	// days) and a session's length (minutes, log).
	GapMinutes     [2]float64
	SessionMinutes [2]float64

	// Load-bearing caches: the share of users for whom a pruned store and download cache
	// is downloaded again on next use (LoadBearingRefill of what was pruned); for the
	// others only NormalRefill of what rung 3/4 pruned comes back (their current
	// project's packages; a gc frees only unreferenced packages, none of which return).
	// A refill is spread over RefillMinutes (log) of active time.
	LoadBearingShare  float64
	LoadBearingRefill float64
	NormalRefill      float64
	RefillMinutes     [2]float64

	// NeededWithin: a replace verdict was needed when the sandbox hits 100% within this
	// long after it (the verdict is advice here: nobody acts on it). Verdicts within
	// NeededWithin of a counted one are the same advice and are not counted again.
	NeededWithin time.Duration
}

// DefaultParams is the fleet of docs/policy.md.
func DefaultParams() Params {
	return Params{
		Sandboxes: 1000, Days: 30, Step: time.Minute,
		SizesGiB:         []float64{4, 6, 8, 11, 16, 24, 32, 48, 64},
		SizeWeights:      []float64{5, 7, 10, 38, 14, 10, 8, 5, 3},
		WorkloadExponent: 0.5,

		SystemGiB:          [2]float64{1.8, 3.0},
		UserStartGiB:       [2]float64{0.1, 1.0},
		UserMiBPerHour:     [2]float64{1, 40},
		CheckoutGiB:        [2]float64{0.2, 2},
		CheckoutsAtStart:   [2]int{1, 2},
		NewCheckoutPerHour: 0.01,

		StoreCeilGiB:       [2]float64{3.5, 6.5},
		StoreMiBPerHour:    [2]float64{20, 400},
		StoreUnreferenced:  0.3,
		PkgCacheCeilGiB:    [2]float64{0.5, 2},
		PkgCacheMiBPerHour: [2]float64{5, 150},

		BuildOutputMiB:       [2]float64{50, 1024},
		BuildsPerHour:        1.5,
		BuildCacheCeilGiB:    [2]float64{0.3, 3},
		BuildCacheMiBPerHour: [2]float64{5, 200},

		CommandsPerDay:  [2]float64{100, 5000},
		FilesPerCommand: 7,
		BytesPerFile:    4096,
		SiteMaxAge:      12 * time.Hour,

		RunawayPerMonth:  0.15,
		RunawayMiBps:     [2]float64{2, 400},
		RunawayMinutes:   [2]float64{1, 30},
		RunawayCleanedUp: 0.7,

		GapMinutes:     [2]float64{5, 2880},
		SessionMinutes: [2]float64{5, 120},

		LoadBearingShare:  0.10,
		LoadBearingRefill: 0.9,
		NormalRefill:      0.1,
		RefillMinutes:     [2]float64{2, 30},

		NeededWithin: 24 * time.Hour,
	}
}
