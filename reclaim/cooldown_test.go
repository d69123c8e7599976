package reclaim

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Inside the cooldown the cheap rungs still run (issue 23 item 2): a launch that finds
// expired site entries and cache entries past min_age frees them, while the whole caches
// wait; the detail says until when and how much they hold. Before, every launch of the
// cooldown said "nothing reclaimable was found" beside 30 MiB of apt archives.
func TestCooldownRunsTheCheapRungs(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout() // site entries 13 h old, cache entries 6-48 h old
	o := e.options()
	o.PruneSites = sitePruner(filepath.Join(e.root, "site"))
	r := e.newReclaimer(o)
	// A purge just now, which freed nothing, started the cooldown.
	r.recordRun(TriggerLaunch, map[string]int64{e.root: 0})
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerLaunch, NeedBytes: mib})
	if err != nil {
		t.Fatal(err)
	}
	if run.FreedBytes <= 0 {
		t.Fatalf("inside the cooldown the cheap rungs freed nothing: %s", run.Detail)
	}
	var sites, entries bool
	for _, a := range run.Actions {
		sites = sites || a.Kind == api.ActionPruneSite && a.Status == api.ActionDone && a.FreedFiles > 0
		entries = entries || a.Kind == api.ActionDelete && a.Status == api.ActionDone && a.FreedBytes > 0
		if a.Kind == api.ActionCommand && a.Status == api.ActionDone {
			t.Errorf("a command ran inside the cooldown: %+v", a)
		}
	}
	if !sites || !entries {
		t.Errorf("site entries pruned %v, cache entries past min_age deleted %v: %s", sites, entries, run.Detail)
	}
	if len(e.replaced) > 0 {
		t.Errorf("marked replace although the purge that started the cooldown freed nothing: %v", e.replaced)
	}
}

// A refusal inside the cooldown says when the held rungs may run and what they would free
// then, never "nothing reclaimable".
func TestCooldownSaysWhenAndHowMuch(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	now := time.Now()
	o := e.options()
	o.Now = func() time.Time { return now }
	// Young entries: nothing past min_age, so only the held whole-cache rung could free them.
	goBuildCache(t, filepath.Join(e.home, ".cache", "go-build"), 100, 100<<10, time.Second)
	r := e.newReclaimer(o)
	r.recordRun(TriggerPressure, map[string]int64{e.root: 30 * mib})
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerLaunch})
	if err != nil {
		t.Fatal(err)
	}
	until := now.Add(o.Cooldown).UTC().Format("15:04:05")
	if !strings.Contains(run.Detail, "cooldown until "+until) || !strings.Contains(run.Detail, "MiB reclaimable then") ||
		strings.Contains(run.Detail, "nothing reclaimable was found") {
		t.Errorf("detail: %s", run.Detail)
	}
	if run.Verdict != api.VerdictReplace || len(e.replaced) == 0 || !strings.Contains(e.replaced[0], "after a purge at") {
		t.Errorf("low again after a purge that freed 30 MiB: verdict %s, marks %v", run.Verdict, e.replaced)
	}
}

// A writer's resume that only pruned (cheap rungs) neither waits for nor starts the
// automatic cooldown; one that climbed the expensive rungs starts it.
func TestResumeStartsTheCooldownOnlyWithTheSameRungs(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	o := e.options()
	o.PruneSites = sitePruner(filepath.Join(e.root, "site"))
	o.MinAge = 1000 * time.Hour // cache entries: only the whole-cache rung takes them
	o.Headroom = 0
	r := e.newReclaimer(o)
	// Low by less than the site holds (5 MiB of expired entries): rung 1 is enough.
	e.fillTo(filepath.Join(e.home, "bulk.bin"), e.reclaimBelow-2*mib)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	if err != nil || run.FreedBytes <= 0 {
		t.Fatalf("resume: %v %s", err, run.Detail)
	}
	if c := r.cooldownFor(TriggerLaunch, e.root); !c.until.IsZero() {
		t.Fatalf("a resume that only pruned site entries started the cooldown (until %s): %s", c.until, run.Detail)
	}
	// Now low by more: the resume climbs to the whole caches, and that starts it.
	e.fillTo(filepath.Join(e.home, "bulk2.bin"), 40*mib)
	run, err = r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.cooldownFor(TriggerLaunch, e.root); c.until.IsZero() {
		t.Errorf("a resume that deleted whole caches did not start the cooldown: %s", run.Detail)
	}
	// And a resume is never held by it.
	e.fillTo(filepath.Join(e.home, "bulk3.bin"), 40*mib)
	run, _ = r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	if strings.Contains(run.Detail, "cooldown until") {
		t.Errorf("a resume was held by the cooldown: %s", run.Detail)
	}
}

// Status's cache sizes follow a deletion (issue 23 item 8): a cache the ladder pruned
// shows its size after the prune, not the size measured before it.
func TestCacheSizesFollowAPrune(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	o := e.options()
	r := e.newReclaimer(o)
	r.holdLoop(context.Background(), r.sizeCaches)
	before := map[string]int64{}
	for _, c := range r.Caches() {
		before[c.Path] = c.EstimatedBytes
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 60*mib)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil || run.FreedBytes <= 0 {
		t.Fatalf("reclaim: %v %s", err, run.Detail)
	}
	pruned := 0
	for _, c := range r.Caches() {
		if c.EstimatedBytes < before[c.Path] {
			pruned++
			if c.SizedAt.Before(run.StartedAt) {
				t.Errorf("%s: sized at %s, before the run", c.Path, c.SizedAt)
			}
		}
	}
	if pruned == 0 {
		t.Errorf("no cache shows a smaller size after the run freed %d bytes: %+v", run.FreedBytes, r.Caches())
	}
}
