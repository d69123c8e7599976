package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/reclaim"
)

// startupRuns counts reclaim runs with trigger startup, whatever their verdict.
func startupRuns(td *testDaemon) int64 {
	var n int64
	for k, v := range td.d.current().reclaim.Counters().Runs {
		if k.Trigger == reclaim.TriggerStartup {
			n += v
		}
	}
	return n
}

// TestReloadKeepsState (issue 13 item 1): a SIGHUP with the same file, and one with a
// changed threshold, apply in place. The watched filesystem keeps its sample and growth
// (a rebuilt watcher has no growth until two new samples), the site its index and pruned
// count, the required FUSE mount its healthy state, probe times and credential expiry;
// launches naming the mount are never refused across the reloads; the start-up reclaim
// does not run again.
func TestReloadKeepsState(t *testing.T) {
	t.Parallel() // long, and mostly waiting: see "Parallel tests" in harness_test.go
	testenv.RequireRoot(t)
	for _, tc := range []struct{ name, from, to string }{
		{"unchanged", "", ""},
		{"threshold changed", `replace_below = "512KiB"`, `replace_below = "1MiB"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt, site, body := siteOnTmpfs(t, 32<<20, 0, "")
			staleJobs(t, site, 3, 16) // drained at start: pruned_total > 0
			for i := 0; i < 4; i++ {  // young jobs the index keeps
				os.WriteFile(filepath.Join(site, fmt.Sprintf("young%d.out", i)), []byte("x"), 0o644)
			}
			agent := mountDir(t, "agent")
			cred := filepath.Join(t.TempDir(), "cred.json")
			if err := fusetest.WriteCred(cred, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			fusetest.Start(t, agent, fusetest.Options{Credential: cred})
			body += mountSpec{name: "agent", path: agent, interval: 200 * time.Millisecond, timeout: 2 * time.Second,
				canary: true, cred: cred}.toml()
			// A 10 s growth window: the 10m default has no rate before a minute of samples.
			td := startDaemon(t, body, probeSelf, func(o *Options) { o.growthWindow = 10 * time.Second })
			td.waitMountState(t, "agent", api.MountHealthy)
			poll(t, time.Minute, "the stale jobs drained", func() bool {
				s := td.status(t).Sites
				return len(s) == 1 && s[0].PrunedTotal == 21 && s[0].Files == 4
			})
			// Growth: a writer of 640 KiB/s, on through the reloads, until the watcher sees
			// a rate (the growth rate is net: writes that stop clear it).
			writing, wrote := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(wrote)
				for {
					select {
					case <-writing:
						return
					case <-time.After(100 * time.Millisecond):
					}
					testenv.Fill(filepath.Join(mnt, fmt.Sprintf("grow-%d", time.Now().UnixNano())), 64<<10)
				}
			}()
			t.Cleanup(func() { close(writing); <-wrote }) // before the tmpfs is unmounted
			poll(t, time.Minute, "a growth rate", func() bool {
				fs := td.status(t).Filesystems
				return len(fs) == 1 && fs[0].GrowthBytesPerSecond > 0
			})
			poll(t, time.Minute, "the start-up reclaim", func() bool { return startupRuns(td) == 1 })
			before := td.status(t)
			comps := td.d.current()

			var refused atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if code, p := launchMounts(t, td, "agent"); code != 200 {
						refused.Add(1)
						t.Logf("launch refused during reload: %d %s %s", code, p.Code, p.Detail)
					}
				}
			}()
			text, _ := os.ReadFile(td.d.opts.ConfigPath)
			if tc.from != "" && !strings.Contains(string(text), tc.from) {
				t.Fatalf("config has no %q", tc.from)
			}
			next := strings.Replace(string(text), tc.from, tc.to, 1)
			os.WriteFile(td.d.opts.ConfigPath, []byte(next), 0o644)
			for i := 0; i < 3; i++ {
				if err := td.d.Reload(); err != nil {
					t.Fatalf("reload: %v", err)
				}
			}
			after := td.status(t) // at once: no time for a rebuilt part to catch up
			time.Sleep(time.Second)
			close(stop)
			wg.Wait()

			if c := td.d.current(); c.pressure != comps.pressure || c.sites != comps.sites || c.reclaim != comps.reclaim || c.mounts != comps.mounts {
				t.Error("a reload rebuilt a component instead of reconfiguring it")
			}
			fa, fb := after.Filesystems[0], before.Filesystems[0]
			if fa.GrowthBytesPerSecond <= 0 || fa.SampledAt.IsZero() || fa.SampledAt.Before(fb.SampledAt) {
				t.Errorf("filesystem lost its samples or growth: before %v growth %.0f, after %v growth %.0f",
					fb.SampledAt, fb.GrowthBytesPerSecond, fa.SampledAt, fa.GrowthBytesPerSecond)
			}
			sa := after.Sites[0]
			if sa.PrunedTotal != 21 || sa.Files != 4 || sa.Problem != nil {
				t.Errorf("site lost its index: pruned_total %d files %d problem %v, want 21, 4, none", sa.PrunedTotal, sa.Files, sa.Problem)
			}
			var ma, mb api.Mount
			for _, m := range after.Mounts {
				if m.Name == "agent" {
					ma = m
				}
			}
			for _, m := range before.Mounts {
				if m.Name == "agent" {
					mb = m
				}
			}
			if ma.State != api.MountHealthy || !ma.Since.Equal(mb.Since) || ma.LastProbeAt == nil ||
				ma.CredentialExpiresAt == nil || mb.CredentialExpiresAt == nil || !ma.CredentialExpiresAt.Equal(*mb.CredentialExpiresAt) {
				t.Errorf("mount lost its probe state: before %+v, after %+v", mb, ma)
			}
			if n := refused.Load(); n > 0 {
				t.Errorf("%d launches refused across the reloads", n)
			}
			if n := startupRuns(td); n != 1 {
				t.Errorf("start-up reclaim ran %d times, want once: a reload ran it again", n)
			}
			if n := len(td.eventsWith(t, api.EventLifecycle, "ready")); n != 1 {
				t.Errorf("%d ready events, want 1 (a reload is no new start)", n)
			}
			if tc.to != "" {
				poll(t, time.Minute, "the new threshold in status", func() bool {
					return td.status(t).Filesystems[0].ReplaceThresholdBytes == 1<<20
				})
				if n := len(td.eventsWith(t, api.EventConfig, "filesystem settings applied")); n != 1 {
					t.Errorf("%d reloads applied filesystem settings, want 1 (the first; the others changed nothing)", n)
				}
			}
		})
	}
}

// TestReloadRaces (issue 13 item 1; meant for -race): reloads that change thresholds,
// site limits and the mode run while launches, reclaims and the drain of a backlog go
// on. Reclaim runs never overlap (their answers' intervals are disjoint) and no data race
// is reported.
func TestReloadRaces(t *testing.T) {
	testenv.RequireRoot(t)
	mnt, site, body := siteOnTmpfs(t, 64<<20, 0, "")
	// Launch calls prune their site themselves: they go to another one, so the backlog
	// is the drain's.
	os.Mkdir(filepath.Join(mnt, "launcher"), 0o755)
	body += fmt.Sprintf("\n[[site]]\nname = \"launcher\"\npath = %q\n", filepath.Join(mnt, "launcher"))
	td := startDaemon(t, body)
	staleJobs(t, site, 300, 1) // drained at the default 500 files/s: ~4 s, across the reloads
	text, _ := os.ReadFile(td.d.opts.ConfigPath)
	variants := []string{
		string(text),
		strings.Replace(string(text), `reclaim_below = "2MiB"`, `reclaim_below = "3MiB"`, 1),
		strings.Replace(string(text), `max_age = "12h"`, `max_age = "11h"`, 1),
		strings.Replace(string(text), "[server]", "[server]\nmode = \"observe\"", 1),
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runs []api.ReclaimRun
	worker := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		}()
	}
	worker(func() { launch(t, td, `{"site": "launcher", "need_bytes": 1024}`) })
	worker(func() {
		run, err := td.d.current().reclaim.Reclaim(t.Context(), reclaim.Request{Trigger: "manual", DryRun: true})
		if err == nil {
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
		}
		time.Sleep(5 * time.Millisecond) // each run is an event: keep the drains' in the trail
	})
	worker(func() { td.status(t); td.do(t, "GET", "/metrics", "") })
	for i := 0; i < 24; i++ {
		os.WriteFile(td.d.opts.ConfigPath, []byte(variants[i%len(variants)]), 0o644)
		if err := td.d.Reload(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	os.WriteFile(td.d.opts.ConfigPath, []byte(variants[0]), 0o644) // enforce mode: the backlog goes
	if err := td.d.Reload(); err != nil {
		t.Fatalf("last reload: %v", err)
	}
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			a, b := runs[i], runs[j]
			if a.StartedAt.Before(b.FinishedAt) && b.StartedAt.Before(a.FinishedAt) {
				t.Fatalf("two reclaims overlapped: %v–%v and %v–%v", a.StartedAt, a.FinishedAt, b.StartedAt, b.FinishedAt)
			}
		}
	}
	if len(runs) == 0 {
		t.Fatal("no reclaim ran during the reloads")
	}
	// Drains: each is one event with its start and duration; two of one site never overlap.
	type span struct{ from, to time.Time }
	var drains map[string][]span // by site
	n := 0
	poll(t, time.Minute, "the drains to end", func() bool {
		drains, n = map[string][]span{}, 0
		for _, e := range td.eventsWith(t, api.EventPrune, "drain of site") {
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e.Fields["started_at"]))
			d, ok := e.Fields["duration_seconds"].(float64)
			if err != nil || !ok {
				t.Fatalf("drain event without started_at or duration_seconds: %+v", e)
			}
			drains[e.Subject] = append(drains[e.Subject], span{at, at.Add(time.Duration(d * float64(time.Second)))})
			n++
		}
		st := td.status(t).Sites[0]
		return n > 0 && st.PendingPrune == 0 && st.Files == 0
	})
	t.Logf("%d drains, %d reclaim runs", n, len(runs))
	for site, spans := range drains {
		for i := range spans {
			for j := i + 1; j < len(spans); j++ {
				a, b := spans[i], spans[j]
				if a.from.Before(b.to) && b.from.Before(a.to) {
					t.Fatalf("two drains of site %s overlapped: %v–%v and %v–%v", site, a.from, a.to, b.from, b.to)
				}
			}
		}
	}
}
