package reclaim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// A writer that keeps filling after a purge gets MarkReplace, not a second purge inside
// the cooldown — also from a new Reclaimer on the same state dir (a restart). Every cache
// entry is younger than min_age here, so nothing cheap is left for the cooldown to let
// run (issue 23: entries past min_age are cheap and run inside it).
func TestCooldownMarksReplaceInsteadOfPurgingAgainAcrossRestart(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	o := e.options()
	o.MinAge = 1000 * time.Hour
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerPressure})
	if err != nil || run.Verdict != api.VerdictReclaimed {
		t.Fatalf("first pressure run: %q %v: %s", run.Verdict, err, run.Detail)
	}
	e.fillTo(filepath.Join(e.home, "bulk2.bin"), 40*mib) // the writer keeps going
	cacheFiles := countFiles(filepath.Join(e.home, ".cache"))
	for i, rr := range []*Reclaimer{r, e.newReclaimer(o)} { // the second is a restart
		e.replaced = nil
		run, err := rr.Reclaim(context.Background(), Request{Trigger: TriggerPressure})
		if err != nil {
			t.Fatal(err)
		}
		if run.Verdict != api.VerdictReplace || len(e.replaced) == 0 {
			t.Errorf("run %d inside the cooldown: verdict %q, MarkReplace %v", i, run.Verdict, e.replaced)
		}
		if !strings.Contains(run.Detail, "reclaim.cooldown") || !strings.Contains(run.Detail, "free of") || !strings.Contains(run.Detail, "cooldown until ") {
			t.Errorf("detail: %s", run.Detail)
		}
		if n := countFiles(filepath.Join(e.home, ".cache")); n != cacheFiles {
			t.Errorf("run %d purged again inside the cooldown (%d -> %d files)", i, cacheFiles, n)
		}
	}
	// A resume is not automatic: it may run the ladder (the cooldown is for pressure/launch).
	later := time.Now().Add(11 * time.Minute)
	o.Now = func() time.Time { return later }
	r3 := e.newReclaimer(o)
	run, _ = r3.Reclaim(context.Background(), Request{Trigger: TriggerPressure})
	if run.Verdict == api.VerdictReplace && strings.Contains(run.Detail, "cooldown") {
		t.Errorf("after the cooldown a pressure run is still blocked: %s", run.Detail)
	}
}

func TestMaxRunsPerHour(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow = 8 * mib
	o := e.options()
	o.MaxRunsPerHour = 2
	r := e.newReclaimer(o)
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 4*mib)
	var verdicts []string
	for i := 0; i < 3; i++ {
		run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
		verdicts = append(verdicts, run.Verdict+":"+run.Detail)
		// Only a climb of the expensive rungs counts against max_runs_per_hour (issue 23:
		// a run that pruned nothing costly is no purge); this box has none, so count the
		// runs as such climbs.
		r.recordRun(TriggerManual, map[string]int64{e.root: 0})
	}
	if !strings.Contains(verdicts[2], "reclaim.max_runs_per_hour") || strings.Contains(verdicts[1], "max_runs_per_hour") {
		t.Errorf("third run should be refused by max_runs_per_hour: %q", verdicts)
	}
}

// The reserve file is fully allocated when there is room; at 100% with only user data a
// resume says replace and keeps it (issue 22: released there, the workload's next command
// ate it and the box stopped full with nothing to release); a writer's explicit request
// releases it, reported as ReserveReleased; it is re-armed once free is back at or above
// reclaim_below + headroom + reserve.
func TestReserveReleasedAndRearmed(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	e.reclaimBelow, e.replaceBelow = 16*mib, 8*mib
	resPath := filepath.Join(e.root, "state", "reserve")
	mustMkdir(t, filepath.Dir(resPath))
	o := e.options()
	o.Reserves = []ReserveConfig{{Filesystem: e.root, Path: resPath, Bytes: 10 * mib}}
	r := e.newReclaimer(o)
	r.reserveTick(context.Background())
	if got := allocated(resPath); got < 10*mib {
		t.Fatalf("reserve allocated %d bytes, want 10 MiB (not sparse)", got)
	}
	if r.ReserveBytes(e.root) < 10*mib {
		t.Errorf("ReserveBytes = %d", r.ReserveBytes(e.root))
	}
	if c := r.Conditions(); len(c) != 1 || c[0].Status {
		t.Errorf("conditions with the reserve held: %+v", c)
	}
	// Fill the disk to 100%: the ladder has nothing; the reserve stays.
	testFill(t, filepath.Join(e.home, "bulk.bin"))
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictReplace || allocated(resPath) < 10*mib {
		t.Fatalf("at 100%% with only user data: verdict %q, reserve holds %d; want replace and the reserve kept", run.Verdict, allocated(resPath))
	}
	if strings.Contains(run.Detail, "below  ") || !strings.Contains(run.Detail, "replace") {
		t.Errorf("detail names no threshold: %s", run.Detail)
	}
	run, err = r.Reclaim(context.Background(), Request{Trigger: TriggerManual, ReleaseReserve: true, Reason: "download the work"})
	if err != nil {
		t.Fatal(err)
	}
	if exists(resPath) || run.Verdict != api.VerdictReplace {
		t.Fatalf("explicit release: verdict %q, reserve exists %v; want it gone and still replace (its room is not health)", run.Verdict, exists(resPath))
	}
	if c := r.Conditions(); len(c) != 1 || !c[0].Status || c[0].Type != api.CondReserveReleased || !strings.Contains(c[0].Message, "download the work") {
		t.Errorf("conditions after release: %+v", c)
	}
	if r.ReleasedBytes(e.root) != 10*mib {
		t.Errorf("ReleasedBytes after release = %d, want 10 MiB", r.ReleasedBytes(e.root))
	}
	var released bool
	for _, a := range run.Actions {
		released = released || a.Kind == api.ActionReleaseReserve && a.Status == api.ActionDone
	}
	if !released {
		t.Errorf("no release_reserve action: %+v", run.Actions)
	}
	// Not enough room yet: no re-arm.
	r.reserveTick(context.Background())
	if exists(resPath) {
		t.Errorf("reserve re-armed while free is below reclaim_below + headroom + reserve")
	}
	os.Remove(filepath.Join(e.home, "bulk.bin"))
	r.reserveTick(context.Background())
	if allocated(resPath) < 10*mib {
		t.Errorf("reserve not re-armed with room back")
	}
	if c := r.Conditions(); len(c) != 1 || c[0].Status {
		t.Errorf("conditions after re-arm: %+v", c)
	}
	var evs int
	for _, ev := range e.events {
		if ev.Kind == api.EventReserve {
			evs++
		}
	}
	if evs < 3 {
		t.Errorf("reserve events: %d, want armed, released, re-armed", evs)
	}
	// Shutdown under replace_below releases it; ReleaseReserve (salvage) does too.
	testFill(t, filepath.Join(e.home, "bulk.bin"))
	r.Shutdown(context.Background())
	if exists(resPath) {
		t.Errorf("Shutdown under replace_below kept the reserve")
	}
}

func TestReleaseReserveOnRequest(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow, e.replaceBelow = 4*mib, 2*mib
	resPath := filepath.Join(e.root, "reserve")
	o := e.options()
	o.Reserves = []ReserveConfig{{Filesystem: e.root, Path: resPath, Bytes: 4 * mib}}
	r := e.newReclaimer(o)
	r.reserveTick(context.Background())
	if !exists(resPath) {
		t.Fatal("reserve not created")
	}
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, ReleaseReserve: true})
	if exists(resPath) || len(run.Actions) == 0 || run.Actions[0].Kind != api.ActionReleaseReserve {
		t.Errorf("release_reserve: exists %v, actions %+v", exists(resPath), run.Actions)
	}
}

// testFill fills the filesystem of p to ENOSPC.
func testFill(t *testing.T, p string) {
	t.Helper()
	err := fillAll(p)
	if err == nil {
		t.Fatalf("fill %s: wrote everything without ENOSPC", p)
	}
}

func fillAll(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
}

// Only one reclaim at a time: a caller whose deadline passes gets ErrBusy.
func TestConcurrentReclaimGetsErrBusy(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	r := e.newReclaimer(e.options())
	r.lock <- struct{}{} // another reclaim holds the lock
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Reclaim(ctx, Request{}); !errors.Is(err, ErrBusy) {
		t.Errorf("err %v, want ErrBusy", err)
	}
	// A healthy resume is a statfs and needs no lock: it answers while another reclaim runs.
	if run, err := r.Resume(ctx); err != nil || run.Verdict != api.VerdictHealthy {
		t.Errorf("healthy resume beside a running reclaim: %q, %v", run.Verdict, err)
	}
	prev := e.reclaimBelow
	e.reclaimBelow = 1 << 40 // now it needs the ladder, which is held
	if _, err := r.Resume(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("resume err %v, want ErrBusy", err)
	}
	e.reclaimBelow = prev
	<-r.lock
	if _, err := r.Reclaim(context.Background(), Request{}); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// Polls of a filesystem that stays low inside the cooldown: the first is one refused
// run (one event, one counted run); the rest only renew ReplaceRecommended, so the audit
// trail is not flooded with the same refusal every poll.
func TestPressurePollsInsideTheCooldownDoNotRepeat(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	o := e.options()
	o.MinAge = 1000 * time.Hour // nothing cheap left inside the cooldown (see above)
	var events []api.Event
	o.Events = func(ev api.Event) { events = append(events, ev) }
	r := e.newReclaimer(o)
	if run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerPressure}); err != nil || run.Verdict != api.VerdictReclaimed {
		t.Fatalf("first pressure run: %v %+v", err, run.Verdict)
	}
	e.fillTo(filepath.Join(e.home, "bulk2.bin"), 40*mib) // the writer keeps going
	e.replaced = nil
	before := r.Counters().Runs[RunKey{TriggerPressure, api.VerdictReplace}]
	for i := 0; i < 5; i++ {
		r.tick(context.Background())
	}
	if got := r.Counters().Runs[RunKey{TriggerPressure, api.VerdictReplace}] - before; got != 1 {
		t.Errorf("%d refused pressure runs counted over 5 polls inside the cooldown, want 1", got)
	}
	if len(e.replaced) < 5 {
		t.Errorf("ReplaceRecommended renewed %d times over 5 polls, want every poll", len(e.replaced))
	}
}

// A launch that waits for the lock another reclaim holds (the start-up reclaim right after
// a watchdog restart, on a disk below its threshold) shares it: once the running reclaim
// has freed what the call needs, the call ends with ErrSatisfied and runs nothing, instead
// of ErrBusy at its deadline (issue 25). While the need is not met it is still ErrBusy.
func TestLaunchSharesTheRunningReclaim(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	r := e.newReclaimer(e.options())
	r.lock <- struct{}{} // the start-up reclaim holds the lock
	defer func() { <-r.lock }()
	var freed atomic.Bool
	asked := make(chan struct{}, 1)
	satisfied := func() bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return freed.Load()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.Reclaim(ctx, Request{Trigger: TriggerLaunch, Satisfied: satisfied}); !errors.Is(err, ErrBusy) {
		t.Errorf("need not met: err %v, want ErrBusy", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Reclaim(context.Background(), Request{Trigger: TriggerLaunch, Satisfied: satisfied})
		done <- err
	}()
	<-asked // the waiting call is asking
	freed.Store(true)
	if err := <-done; !errors.Is(err, ErrSatisfied) {
		t.Errorf("need met by the running reclaim: err %v, want ErrSatisfied", err)
	}
}
