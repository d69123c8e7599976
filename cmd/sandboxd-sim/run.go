package main

import (
	"math"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backtest"
	"github.com/sandboxd/sandboxd/internal/units"
	"github.com/sandboxd/sandboxd/pressure"
	"github.com/sandboxd/sandboxd/reclaim"
)

// result is what one sandbox did under one policy.
type result struct {
	everFull      bool
	enospcMinutes float64
	failed        float64 // commands that ran while the disk was full
	commands      float64
	reclaims      int
	redownloaded  int64 // bytes the download caches fetched again after prunes
	replaces      []time.Time
	fulls         []time.Time     // starts of full episodes
	leads         []time.Duration // per full episode: how long a warning had been up (0: none)
	thrashSeen    bool            // the store or download cache was CacheThrashing at some point
	loadBearing   bool
	fillingUp     int // DiskFillingUp raises
}

// refillInterval is how often the daemon walks a cache pruned in the last hour
// (reclaim.Options.RefillInterval's default).
const refillInterval = 5 * time.Minute

// sim runs one sandbox under one policy.
type sim struct {
	p   Params
	sp  spec
	pol Policy
	d   disk
	e   *backtest.Engine
	res result

	prevOut   int64     // the previous build's outputs, deleted once the next is written
	cmdAcc    float64   // fractional commands carried to the next step
	warnSince time.Time // when the current warning started (zero: none up)
	full      bool      // the last step ended with the disk full
	replace   bool      // the verdict is replace
	nextCheck time.Time // next refill walk
	rr        refillRand
	writes    []write // a step's demands, reused
	// What each cache has taken in so far: new content stops at the ceiling.
	storeSeen, pkgSeen, bcSeen float64
	// The daemon's background sizing of the caches (every sizeInterval of running
	// time): what a prune's baseline growth is measured from (reclaim.GrowthBaseline).
	sizedStore, sizedPkg int64
	sizedAt, nextSize    time.Time
}

// sizeInterval is reclaim.Options.SizeInterval's default.
const sizeInterval = 10 * time.Minute

// write is one demand of a step: bytes to add to a part of the disk.
type write struct {
	to    *int64
	bytes float64
}

// refillRand draws how long a refill takes: a stream of its own, so prunes (which differ
// between policies) never shift the workload's draws.
type refillRand struct{ seed, n uint64 }

func (r *refillRand) minutes(p Params) int {
	r.n++
	x := rng(r.seed, 1000+r.n)
	return max(1, int(math.Round(logUni(x, p.RefillMinutes))))
}

// simulate runs sandbox sp through its 30 days under pol.
func simulate(p Params, sp spec, pol Policy) result {
	s := &sim{p: p, sp: sp, pol: pol, rr: refillRand{seed: sp.seed}}
	s.res.loadBearing = sp.loadBearing
	d := &s.d
	d.size, d.system, d.user = sp.size, sp.system, sp.userStart
	for _, c := range sp.checkouts {
		d.checkouts += c
	}
	d.store = int64(sp.storeStart * float64(sp.storeCeil))
	d.storeUnref = int64(float64(d.store) * p.StoreUnreferenced)
	d.pkg = int64(sp.pkgStart * float64(sp.pkgCeil))
	d.buildCache = int64(sp.bcStart * float64(sp.bcCeil))
	s.storeSeen, s.pkgSeen, s.bcSeen = float64(d.store), float64(d.pkg), float64(d.buildCache)
	d.storeHist.Name, d.pkgHist.Name = "store", "download-cache"
	if pol.Kind == kindSandboxd {
		s.e = backtest.New(backtest.Config{
			Filesystem: pressure.FSConfig{Path: "/", ReclaimBelow: pol.ReclaimBelow, ReplaceBelow: pol.ReplaceBelow, WarnTimeToFull: pol.WarnTimeToFull},
			Pressure:   pressure.Options{SampleInterval: p.Step, TransitionPeriod: time.Minute, LeadTime: pol.LeadTime},
			Headroom:   pol.Headroom, Cooldown: pol.Cooldown, MaxRunsPerHour: 6,
			PollInterval: p.Step,
			Ladder: func(t time.Time, deficit uint64) (string, uint64) {
				rung, freed := s.ladder(t, int64(min(deficit, 1<<62)))
				return rung, uint64(freed)
			},
		})
	}
	for i := range sp.sessions {
		s.session(&sp.sessions[i])
	}
	if s.e != nil {
		s.res.fillingUp = s.e.Summary().Raised[api.CondDiskFillingUp]
	}
	return s.res
}

func (s *sim) session(ss *session) {
	r := rng(ss.seed, 2)
	t := ss.start
	s.resume(t)
	for m := 0; m < ss.minutes; m++ {
		t = t.Add(s.p.Step)
		s.minute(t, m, ss, r)
	}
	d := &s.d
	if ss.runaway != nil && ss.runaway.cleaned {
		d.runaway = 0
	}
	if s.pol.Kind == kindSandboxd && d.reserve > 0 && d.avail() < int64(s.pol.ReplaceBelow.Resolve(uint64(d.size))) {
		// Stopped below replace_below: the reserve is released so the next boot has room.
		s.e.OwnWrite(-d.reserve)
		d.reserve = 0
	}
}

// resume is the check at a resume: the write-up's whole policy; sandboxd's resume
// reclaim (PressureNeed on what the disk holds now, no cooldown for a resume).
func (s *sim) resume(t time.Time) {
	d := &s.d
	switch s.pol.Kind {
	case kindStatic:
		replace := false
		if d.avail() < s.pol.StaticReclaim {
			s.res.reclaims++
			d.pruneSite(t, s.p.SiteMaxAge)
			gc := take(&d.store, d.storeUnref)
			d.storeUnref = 0
			s.pruned(t, &d.store, &d.storeHist, gc, 0, 0)
			s.pruned(t, &d.pkg, &d.pkgHist, 0, take(&d.pkg, d.pkg), 0)
			s.bcSeen -= float64(take(&d.buildCache, d.buildCache))
			replace = d.avail() < s.pol.StaticReplace
		}
		s.verdict(t, replace)
	case kindSandboxd:
		st := s.e.State()
		if st.Time.IsZero() {
			s.step(t)
			st = s.e.State()
		}
		fig := st.Figures
		fig.AvailBytes = uint64(d.avail())
		need, target, _ := reclaim.PressureNeed(fig, s.pol.Headroom, units.Threshold{}) // inodes are not modelled
		if need {
			s.res.reclaims++
			_, freed := s.ladder(t, int64(target)-d.avail())
			s.e.OwnFree(freed)
		}
	}
}

// minute is one step of an active sandbox: the workload's writes (clipped at 100%), the
// policy, and the scoring.
func (s *sim) minute(t time.Time, m int, ss *session, r interface{ Float64() float64 }) {
	p, sp, d := s.p, s.sp, &s.d
	sm := p.Step.Minutes()
	u1, u2, u3, u4 := r.Float64(), r.Float64(), r.Float64(), r.Float64()

	// Demands of this step, by what they write to.
	w := s.writes[:0]
	add := func(to *int64, b float64) {
		if b > 0 {
			w = append(w, write{to, b})
		}
	}
	// New content of a cache arrives until the cache has held its ceiling once (what was
	// pruned comes back only by a refill).
	grow := func(seen *float64, ceil int64, perMin float64) float64 {
		return max(min(perMin*sm, float64(ceil)-*seen), 0)
	}
	add(&d.user, sp.userPerMin*sm)
	sg := grow(&s.storeSeen, sp.storeCeil, sp.storePerMin)
	add(&d.store, sg)
	pg := grow(&s.pkgSeen, sp.pkgCeil, sp.pkgPerMin)
	add(&d.pkg, pg)
	bg := grow(&s.bcSeen, sp.bcCeil, sp.bcPerMin)
	add(&d.buildCache, bg)
	var out float64
	if u1 < p.BuildsPerHour*sm/60 {
		out = math.Exp(math.Log(p.BuildOutputMiB[0])+u2*(math.Log(p.BuildOutputMiB[1])-math.Log(p.BuildOutputMiB[0]))) * mib
		add(&d.churn, out)
	}
	if u3 < p.NewCheckoutPerHour*sm/60 {
		add(&d.checkouts, math.Exp(math.Log(p.CheckoutGiB[0])+u4*(math.Log(p.CheckoutGiB[1])-math.Log(p.CheckoutGiB[0])))*gib)
	}
	s.cmdAcc += sp.cmdsPerMin * sm
	cmds := math.Floor(s.cmdAcc)
	s.cmdAcc -= cmds
	var siteBytes int64
	add(&siteBytes, cmds*float64(p.FilesPerCommand)*float64(p.BytesPerFile))
	if ra := ss.runaway; ra != nil && m >= ra.at && m < ra.at+ra.minutes {
		add(&d.runaway, ra.bytesPerMin*sm)
	}
	firstRefill := len(w)
	for i := range d.refills {
		add(d.refills[i].cache, d.refills[i].perMin*sm)
	}
	s.writes = w
	n := len(w)

	var demand float64
	for i := range n {
		demand += w[i].bytes
	}
	scale, fullFrac := 1.0, 0.0
	if a := float64(d.avail()); demand > a {
		scale = a / demand
		fullFrac = 1 - scale
	}
	for i := range n {
		b := int64(w[i].bytes * scale)
		if w[i].to == &siteBytes {
			d.addSite(t, b)
			continue
		}
		*w[i].to += b
		if i >= firstRefill {
			s.res.redownloaded += b
		}
	}
	d.storeUnref += int64(sg * scale * p.StoreUnreferenced)
	s.storeSeen += sg * scale
	s.pkgSeen += pg * scale
	s.bcSeen += bg * scale
	if out > 0 {
		take(&d.churn, s.prevOut) // the build replaced the previous outputs
		s.prevOut = int64(out * scale)
	}
	kept := d.refills[:0]
	for _, rf := range d.refills {
		if rf.minutes--; rf.minutes > 0 {
			kept = append(kept, rf)
		}
	}
	d.refills = kept

	// The policy at the end of the step.
	switch s.pol.Kind {
	case kindStatic:
		d.pruneSite(t, p.SiteMaxAge) // at every launch
	case kindSandboxd:
		if f := d.pruneSite(t, p.SiteMaxAge); f > 0 { // the site's retention, continuous
			s.e.OwnFree(f)
		}
		s.checkRefills(t)
		if !t.Before(s.nextSize) {
			s.sizedStore, s.sizedPkg, s.sizedAt, s.nextSize = d.store, d.pkg, t, t.Add(sizeInterval)
		}
	}
	prevWarn := s.warnSince
	if s.pol.Kind == kindSandboxd {
		s.step(t)
	}

	// Scoring.
	s.res.commands += cmds
	if fullFrac > 0 {
		s.res.everFull = true
		s.res.enospcMinutes += fullFrac * sm
		s.res.failed += cmds * fullFrac
		if !s.full {
			at := t.Add(-time.Duration(fullFrac * float64(p.Step)))
			s.res.fulls = append(s.res.fulls, at)
			lead := time.Duration(0)
			if !prevWarn.IsZero() {
				lead = max(at.Sub(prevWarn), 0)
			}
			s.res.leads = append(s.res.leads, lead)
		}
	}
	s.full = fullFrac > 0
}

// step feeds the engine the disk as it is at t, arms the reserve where there is room
// (above the reclaim threshold plus headroom plus the reserve, CONTRACT §13), and
// follows the verdict and the warnings.
func (s *sim) step(t time.Time) {
	d := &s.d
	if d.reserve == 0 && s.pol.Reserve > 0 {
		thr := int64(s.pol.ReclaimBelow.Resolve(uint64(d.size)))
		if d.avail() >= thr+s.pol.Headroom+s.pol.Reserve {
			d.reserve = s.pol.Reserve
			s.e.OwnWrite(d.reserve)
		}
	}
	for _, ev := range s.e.Step(t, backtest.Sample{AvailBytes: uint64(d.avail()), SizeBytes: uint64(d.size)}) {
		if ev.Kind == backtest.ReclaimStarted {
			s.res.reclaims++
		}
	}
	st := s.e.State()
	s.verdict(t, st.Verdict == api.VerdictReplace)
	if st.FillingUp || st.Pressure || st.Replace {
		if s.warnSince.IsZero() {
			s.warnSince = t
		}
	} else {
		s.warnSince = time.Time{}
	}
}

// verdict counts a replace verdict when it starts.
func (s *sim) verdict(t time.Time, replace bool) {
	if n := len(s.res.replaces); replace && !s.replace && (n == 0 || t.Sub(s.res.replaces[n-1]) > s.p.NeededWithin) {
		s.res.replaces = append(s.res.replaces, t)
	}
	s.replace = replace
}

// ladder is sandboxd's ladder on the model (reclaim.Reclaimer's rungs): expired site
// entries, the store's gc, cache entries oldest first (the build cache, then the
// download cache, then the store), stopping once want bytes are freed. With
// CacheThrashing in force a thrashing cache's rungs come after every other's, and only
// as far as the replace threshold.
func (s *sim) ladder(t time.Time, want int64) (rung string, freed int64) {
	d := &s.d
	try := func(name string, f func(w int64) int64) {
		if freed < want {
			if n := f(want - freed); n > 0 {
				freed += n
				rung = name
			}
		}
	}
	var gc, storeEntries, pkgEntries int64
	gcStore := func(w int64) int64 {
		n := take(&d.store, min(d.storeUnref, w+64*mib)) // a gc frees what it frees
		d.storeUnref -= n
		gc += n
		return n
	}
	entriesStore := func(w int64) int64 {
		n := take(&d.store, w)
		d.storeUnref = min(d.storeUnref, d.store)
		storeEntries += n
		return n
	}
	entriesPkg := func(w int64) int64 { n := take(&d.pkg, w); pkgEntries += n; return n }
	entriesBuild := func(w int64) int64 {
		n := take(&d.buildCache, w)
		s.bcSeen -= float64(n) // builds rebuild what they use again: not a download
		return n
	}
	thrS := s.pol.Thrash && d.storeHist.Thrashing()
	thrP := s.pol.Thrash && d.pkgHist.Thrashing()
	try("sites", func(int64) int64 { return d.pruneSite(t, s.p.SiteMaxAge) })
	if !thrS {
		try("gc", gcStore)
	}
	try("entries", entriesBuild)
	if !thrP {
		try("entries", entriesPkg)
	}
	if !thrS {
		try("entries", entriesStore)
	}
	if thrS || thrP {
		// Only as far as the need: the replace threshold (reclaim.Reclaimer.ladder).
		floor := int64(s.pol.ReplaceBelow.Resolve(uint64(d.size)))
		want = min(want, freed+max(floor-d.avail(), 0))
	}
	if thrS {
		try("gc", gcStore)
		try("entries", entriesStore)
	}
	if thrP {
		try("entries", entriesPkg)
	}
	s.pruned(t, &d.store, &d.storeHist, gc, storeEntries, s.sizedStore)
	s.pruned(t, &d.pkg, &d.pkgHist, 0, pkgEntries, s.sizedPkg)
	if rung == "" {
		rung = "nothing"
	}
	return rung, freed
}

// pruned records a prune of a download cache (its refill history, the daemon's rule) and
// schedules what its user downloads again: a load-bearing cache nearly all of it, another
// only some of what rung 3 took (a gc frees unreferenced packages only).
func (s *sim) pruned(t time.Time, c *int64, h *reclaim.RefillHistory, gc, entries, sized int64) {
	if gc+entries <= 0 {
		return
	}
	h.Pruned(t, gc+entries, *c, reclaim.GrowthBaseline(sized, s.sizedAt, *c+gc+entries, t))
	back := float64(entries) * s.p.NormalRefill
	if s.sp.loadBearing {
		back = float64(gc+entries) * s.p.LoadBearingRefill
	}
	if back > 0 {
		m := s.rr.minutes(s.p)
		s.d.refills = append(s.d.refills, refill{cache: c, perMin: back / float64(m) / s.p.Step.Minutes(), minutes: m})
	}
	if s.nextCheck.IsZero() || s.nextCheck.After(t.Add(refillInterval)) {
		s.nextCheck = t.Add(refillInterval)
	}
}

// checkRefills is the daemon's refill walk (reclaim.Reclaimer.CheckRefills) every
// refillInterval of running time while a prune is in its window.
func (s *sim) checkRefills(t time.Time) {
	d := &s.d
	if s.nextCheck.IsZero() || t.Before(s.nextCheck) {
		return
	}
	for _, x := range []struct {
		h *reclaim.RefillHistory
		c int64
	}{{&d.storeHist, d.store}, {&d.pkgHist, d.pkg}} {
		x.h.Observe(t, x.c)
		x.h.Expire(t)
		if x.h.Thrashing() {
			s.res.thrashSeen = true
		}
	}
	s.nextCheck = time.Time{}
	if d.storeHist.Open() || d.pkgHist.Open() {
		s.nextCheck = t.Add(refillInterval)
	}
}
