package reclaim

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Words that match what happened (issue 10, item 8).

// A run that frees nothing is never "reclaimed": still short and above replace_below it is
// "low", and exactly at replace_below is not below it (the documented comparison).
func TestNothingFreedIsNotReclaimed(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	avail := e.avail()
	e.reclaimBelow, e.replaceBelow = 64*mib, avail // free is exactly the replace threshold
	r := e.newReclaimer(e.options())
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictLow || run.FreedBytes != 0 {
		t.Fatalf("nothing to free, free at exactly replace_below: verdict %q freed %d: %s", run.Verdict, run.FreedBytes, run.Detail)
	}
	for _, w := range []string{"nothing reclaimable was found", "still short of the target", "above filesystem.replace_below"} {
		if !strings.Contains(run.Detail, w) {
			t.Errorf("detail lacks %q: %s", w, run.Detail)
		}
	}
	if strings.Contains(run.Detail, "reclaimed") || len(e.replaced) != 0 {
		t.Errorf("detail %q, replace marks %v", run.Detail, e.replaced)
	}
}

// A dry run on a healthy disk still shows its plan, says nothing is needed and changes
// nothing; with target_free the detail names that target, not reclaim_below + headroom.
func TestDryRunPlansOnAHealthyDiskAndNamesItsTarget(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	before := hashTree(t, e.root)
	r := e.newReclaimer(e.options())
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	planned := 0
	for _, a := range run.Actions {
		if a.Status == api.ActionPlanned {
			planned++
		}
	}
	if run.Verdict != api.VerdictHealthy || planned == 0 || !strings.Contains(run.Detail, "nothing needed") || !strings.Contains(run.Detail, "would reclaim") {
		t.Fatalf("dry run on a healthy disk: verdict %q, %d planned: %s", run.Verdict, planned, run.Detail)
	}
	target := int64(e.avail() + 30*mib)
	run, err = r.Reclaim(context.Background(), Request{Trigger: TriggerManual, DryRun: true, TargetFree: target})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(run.Detail, "(target_free)") || strings.Contains(run.Detail, "plus reclaim.headroom") || !strings.Contains(run.Detail, "(projected)") {
		t.Errorf("dry run with target_free: %s", run.Detail)
	}
	if run.FreedBytes != 0 || len(run.Projected) != 1 || run.Projected[0].AvailBytes <= run.After[0].AvailBytes {
		t.Errorf("a dry run freed %d; after %+v projected %+v", run.FreedBytes, run.After, run.Projected)
	}
	sameTree(t, before, hashTree(t, e.root))

	// A target below reclaim_below plus headroom is still the target named.
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 70*mib) // below 64 MiB + 16 MiB headroom
	small := int64(75 * mib)
	run, _ = r.Reclaim(context.Background(), Request{Trigger: TriggerManual, DryRun: true, TargetFree: small})
	if !strings.Contains(run.Detail, "the target "+api.FormatSize(uint64(small))+" free (target_free)") {
		t.Errorf("dry run with a small target_free: %s", run.Detail)
	}
	seen := map[string]bool{}
	for _, a := range run.Actions {
		k := a.Source + " " + a.Kind + " " + a.Status
		if a.Kind == api.ActionDelete && seen[k] {
			t.Errorf("%s listed twice in the plan: %+v", k, run.Actions)
		}
		seen[k] = true
	}
}

// A gc command cut by the call's deadline says so, not the 2m command timeout it never
// reached.
func TestCommandKilledByTheCallsDeadlineSaysSo(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	bin := t.TempDir()
	writeFileStr(t, filepath.Join(bin, "hang.sh"), "#!/bin/sh\nexec sleep 300\n")
	os.Chmod(filepath.Join(bin, "hang.sh"), 0o755)
	writeFile(t, filepath.Join(e.root, "c1", "a"), mib, 5*time.Hour)
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	o := e.options()
	o.CommandTimeout = 2 * time.Minute
	o.Caches = []CacheConfig{{Name: "c1", Path: filepath.Join(e.root, "c1"), Command: []string{filepath.Join(bin, "hang.sh")}}}
	o.LookPath = onlyTools()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	run, err := e.newReclaimer(o).Reclaim(ctx, Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range run.Actions {
		if a.Kind == api.ActionCommand {
			if !strings.Contains(a.Error, "at the call's deadline") || regexp.MustCompile(`\b2m\b|2m0s`).MatchString(a.Error) {
				t.Errorf("command cut by the call's deadline: %q", a.Error)
			}
			return
		}
	}
	t.Fatalf("no command action: %+v", run.Actions)
}

// A declared root that is also discovered is one cache.
func TestACacheIsListedOnce(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	gb := filepath.Join(e.home, ".cache", "go-build")
	goBuildCache(t, gb, 4, 4096, 48*time.Hour)
	o := e.options()
	o.Caches = []CacheConfig{{Name: "gb", Path: gb, Kind: "go-build"}}
	r := e.newReclaimer(o)
	r.discover()
	n := 0
	for _, c := range r.Caches() {
		if c.Path == gb {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%s listed %d times: %+v", gb, n, r.Caches())
	}
}

// Healthy resumes are measured every time (never cached) and, having done nothing, are
// counted but not one audit event each: a runner resuming in a loop cannot push the
// trail out.
func TestHealthyResumesAreCountedNotLogged(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	e.reclaimBelow = 1 * mib
	r := e.newReclaimer(e.options())
	for i := 0; i < 20; i++ {
		if run, err := r.Resume(context.Background()); err != nil || run.Verdict != api.VerdictHealthy || run.Cached {
			t.Fatalf("resume %d: %q cached %v %v", i, run.Verdict, run.Cached, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev.Kind == api.EventReclaimRun {
			t.Fatalf("a healthy resume recorded an event: %s", ev.Message)
		}
	}
	if n := r.Counters().Runs[RunKey{TriggerResume, api.VerdictHealthy}]; n != 20 {
		t.Errorf("healthy resumes counted %d, want 20", n)
	}
}

// A cache that rung 3 empties is one "done" line, not also a rung-4 "would free nothing".
func TestAnEmptiedCacheIsListedOnce(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	for i := 0; i < 4; i++ {
		writeFile(t, filepath.Join(e.root, "c1", "e"+string(rune('a'+i))), mib, 5*time.Hour)
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib) // 40 MiB short: more than the cache
	o := e.options()
	o.Caches = []CacheConfig{{Name: "c1", Path: filepath.Join(e.root, "c1")}}
	run, err := e.newReclaimer(o).Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, a := range run.Actions {
		if a.Source == "c1" {
			lines = append(lines, a.Status+" "+a.Error)
		}
	}
	if len(lines) != 1 || lines[0] != api.ActionDone+" " {
		t.Errorf("c1 listed as %q, want one done line: %s", lines, run.Detail)
	}
}
