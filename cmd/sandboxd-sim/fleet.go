package main

import (
	"math"
	"math/rand/v2"
	"time"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// epoch is the simulated fleet's day 0 (any fixed instant: the run must not depend on
// the wall clock).
var epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// spec is one sandbox of the fleet: its disk, its user's workload and its sessions, drawn
// from the fleet's seed and the sandbox's index only, so every policy sees the same
// fleet.
type spec struct {
	index       int
	seed        uint64
	size        int64
	scale       float64 // the workload's scale (Params.WorkloadExponent)
	system      int64
	userStart   int64
	userPerMin  float64
	checkouts   []int64
	storeCeil   int64
	storePerMin float64
	pkgCeil     int64
	pkgPerMin   float64
	bcCeil      int64
	bcPerMin    float64
	cmdsPerMin  float64
	loadBearing bool
	// Where the caches stand at day 0 (a fleet of sandboxes of every age): shares of
	// their ceilings.
	storeStart, pkgStart, bcStart float64
	sessions                      []session
}

// session is one resume-to-suspend stretch of a sandbox's life.
type session struct {
	start   time.Time
	minutes int
	seed    uint64
	runaway *runaway
}

// runaway is a `yes > fill` in a session: it starts at minute `at`, writes bytesPerMin
// for `minutes` (or until the disk is full), and is deleted at the session's end when
// cleaned.
type runaway struct {
	at, minutes int
	bytesPerMin float64
	cleaned     bool
}

// rng is a PCG stream for one purpose of one sandbox.
func rng(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream*0x9e3779b97f4a7c15+1))
}

func uni(r *rand.Rand, lh [2]float64) float64 { return lh[0] + r.Float64()*(lh[1]-lh[0]) }

func logUni(r *rand.Rand, lh [2]float64) float64 {
	return math.Exp(math.Log(lh[0]) + r.Float64()*(math.Log(lh[1])-math.Log(lh[0])))
}

func weighted(r *rand.Rand, vals, weights []float64) float64 {
	var sum float64
	for _, w := range weights {
		sum += w
	}
	x := r.Float64() * sum
	for i, w := range weights {
		if x < w {
			return vals[i]
		}
		x -= w
	}
	return vals[len(vals)-1]
}

// newSpec draws sandbox i of the fleet of seed.
func newSpec(p Params, seed uint64, i int) spec {
	s := spec{index: i, seed: seed ^ uint64(i+1)*0xbf58476d1ce4e5b9}
	r := rng(s.seed, 1)
	s.size = int64(weighted(r, p.SizesGiB, p.SizeWeights) * gib)
	s.system = int64(uni(r, p.SystemGiB) * gib)
	s.scale = math.Pow(float64(s.size)/(11*gib), p.WorkloadExponent)
	s.userStart = int64(logUni(r, p.UserStartGiB) * gib * s.scale)
	s.userPerMin = logUni(r, p.UserMiBPerHour) * mib / 60 * s.scale
	n := p.CheckoutsAtStart[0] + r.IntN(p.CheckoutsAtStart[1]-p.CheckoutsAtStart[0]+1)
	for range n {
		s.checkouts = append(s.checkouts, int64(logUni(r, p.CheckoutGiB)*gib*s.scale))
	}
	s.storeCeil = int64(uni(r, p.StoreCeilGiB) * gib * s.scale)
	s.storePerMin = logUni(r, p.StoreMiBPerHour) * mib / 60
	s.pkgCeil = int64(uni(r, p.PkgCacheCeilGiB) * gib * s.scale)
	s.pkgPerMin = logUni(r, p.PkgCacheMiBPerHour) * mib / 60
	s.bcCeil = int64(uni(r, p.BuildCacheCeilGiB) * gib * s.scale)
	s.bcPerMin = logUni(r, p.BuildCacheMiBPerHour) * mib / 60
	s.loadBearing = r.Float64() < p.LoadBearingShare
	s.storeStart, s.pkgStart, s.bcStart = uni(r, [2]float64{0.1, 1}), uni(r, [2]float64{0.1, 1}), uni(r, [2]float64{0.1, 1})
	cmdsPerDay := logUni(r, p.CommandsPerDay)

	// Sessions: gaps and lengths, then at most one runaway fill per week of life.
	end := epoch.Add(time.Duration(p.Days) * 24 * time.Hour)
	t := epoch.Add(time.Duration(r.Float64() * float64(time.Hour)))
	active := 0
	for t.Before(end) {
		m := int(math.Round(logUni(r, p.SessionMinutes)))
		ss := session{start: t, minutes: m, seed: r.Uint64()}
		s.sessions = append(s.sessions, ss)
		active += m
		t = t.Add(time.Duration(m)*time.Minute + time.Duration(logUni(r, p.GapMinutes)*float64(time.Minute)))
	}
	weeks := max(p.Days/7, 1)
	for range weeks {
		if r.Float64() < p.RunawayPerMonth*float64(p.Days)/30/float64(weeks) && len(s.sessions) > 0 {
			k := r.IntN(len(s.sessions))
			ss := &s.sessions[k]
			ss.runaway = &runaway{at: r.IntN(max(ss.minutes, 1)), minutes: int(math.Ceil(logUni(r, p.RunawayMinutes))),
				bytesPerMin: logUni(r, p.RunawayMiBps) * mib * 60, cleaned: r.Float64() < p.RunawayCleanedUp}
		}
	}
	activePerDay := float64(active) / float64(p.Days)
	if activePerDay > 0 {
		s.cmdsPerMin = cmdsPerDay / activePerDay
	}
	return s
}
