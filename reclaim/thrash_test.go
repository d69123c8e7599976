package reclaim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// A cache whose pruned content a writer downloads again right after each prune is seen
// as load-bearing after 3 prunes (CacheThrashing, an event, a counted refill); from then
// on the ladder takes every other cache first and the verdict says to grow the disk; the
// verdict survives a restart; a last-resort prune that does not refill clears it.
func TestLoadBearingCacheIsTakenLast(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.reclaimBelow = 64 * mib
	lb := filepath.Join(e.root, "deps")                  // load-bearing: the writer refills it
	build := filepath.Join(e.home, ".cache", "go-build") // regenerable: nobody refills it
	var clock struct {
		sync.Mutex
		now time.Time
	}
	clock.now = time.Now()
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.now }
	advance := func(d time.Duration) { clock.Lock(); clock.now = clock.now.Add(d); clock.Unlock() }
	n := 0
	// refill is the test's writer: what the tool would download again on its next use,
	// written as entries old enough for the ladder (their age is the cache's, not the
	// download's: a store keeps a package's mtime).
	refill := func(bytes int) {
		for left := bytes; left > 0; left -= 2 * mib {
			writeFile(t, filepath.Join(lb, fmt.Sprintf("pkg%03d", n)), 2*mib, 48*time.Hour-time.Duration(n)*time.Minute)
			n++
		}
	}
	refill(60 * mib)
	goBuildCache(t, build, 200, 256<<10, 72*time.Hour) // 50 MiB
	o := e.options()
	o.Caches = []CacheConfig{{Name: "deps", Path: lb, Order: 10}} // first in the ladder while not thrashing
	o.Now = now
	o.MinAge = time.Minute
	r := e.newReclaimer(o)
	bulk := 0
	lowAgain := func() {
		bulk++
		e.fillTo(filepath.Join(e.home, fmt.Sprintf("bulk%d.bin", bulk)), 40*mib)
	}
	ctx := context.Background()
	for i := range ThrashPrunes {
		r.sizeCaches(ctx) // the background sizing: the cache is not growing by itself
		advance(5 * time.Minute)
		lowAgain()
		before := countFiles(lb)
		run, err := r.Reclaim(ctx, Request{Trigger: TriggerManual})
		if err != nil || run.Verdict != api.VerdictReclaimed {
			t.Fatalf("prune %d: %q %v: %s", i, run.Verdict, err, run.Detail)
		}
		freed := before - countFiles(lb)
		if freed == 0 || countFiles(build) != 200 {
			t.Fatalf("prune %d took %d deps entries and left go-build with %d of 200: deps (order 10) should go first while it is not thrashing",
				i, freed, countFiles(build))
		}
		if i > 0 && r.Refills()[0].Thrashing {
			t.Fatalf("thrashing after %d prunes", i+1)
		}
		advance(10 * time.Minute)
		refill(freed * 2 * mib) // the tool downloads it all again
		r.CheckRefills(ctx)     // the measurement Run does every RefillInterval
		advance(2 * time.Hour)
		// The disk is back where it was: make room for the next round's fill.
		for b := bulk; b >= 1; b-- {
			removeFile(t, filepath.Join(e.home, fmt.Sprintf("bulk%d.bin", b)))
		}
		bulk = 0
	}
	rs := r.Refills()
	if len(rs) != 1 || rs[0].Name != "deps" || !rs[0].Thrashing || rs[0].RefilledBytes <= 0 {
		t.Fatalf("refills after %d refilled prunes: %+v", ThrashPrunes, rs)
	}
	cond := findCond(r.Conditions(), CondCacheThrashing, "deps")
	if cond == nil || !cond.Status || cond.Severity != "warning" || !strings.Contains(cond.Message, inUseClause) {
		t.Fatalf("condition: %+v", cond)
	}
	if ev := e.eventWith(CondCacheThrashing); ev == nil || ev.Subject != "deps" || ev.Kind != api.EventCondition {
		t.Errorf("no CacheThrashing event: %+v", e.events)
	}
	if c := r.Counters(); c.RefilledBytes["deps"] < 3*8*mib {
		t.Errorf("refilled bytes counted %d, want the 3 refills", c.RefilledBytes["deps"])
	}

	// Now low again: go-build goes first, deps is kept, and the verdict says why.
	lowAgain()
	keep := countFiles(lb)
	run, err := r.Reclaim(ctx, Request{Trigger: TriggerManual})
	if err != nil || run.Verdict != api.VerdictReclaimed {
		t.Fatalf("run with deps thrashing: %q %v: %s", run.Verdict, err, run.Detail)
	}
	if countFiles(lb) != keep || countFiles(build) == 200 {
		t.Errorf("deps %d -> %d entries, go-build %d of 200: the thrashing cache must go last", keep, countFiles(lb), countFiles(build))
	}
	t.Logf("detail: %s", run.Detail)
	for _, want := range []string{"cache deps", inUseClause, "kept"} {
		if !strings.Contains(run.Detail, want) {
			t.Errorf("detail lacks %q: %s", want, run.Detail)
		}
	}

	// A restart keeps the verdict (the state dir).
	r2 := e.newReclaimer(o)
	if c := findCond(r2.Conditions(), CondCacheThrashing, "deps"); c == nil || !c.Status {
		t.Fatalf("after a restart: %+v", c)
	}

	// Low again with go-build nearly gone: deps is kept while the disk is above the replace
	// threshold (the verdict says low, and grow the disk) ...
	advance(2 * time.Hour)
	lowAgain()
	before := countFiles(lb)
	run, err = r2.Reclaim(ctx, Request{Trigger: TriggerManual})
	if err != nil || countFiles(lb) != before || run.Verdict != api.VerdictLow || !strings.Contains(run.Detail, inUseClause) {
		t.Fatalf("above replace_below: deps %d -> %d: %q %v: %s", before, countFiles(lb), run.Verdict, err, run.Detail)
	}
	// ... and below it only deps can meet the need: taken as a last resort, up to the
	// replace threshold, and said so.
	advance(2 * time.Hour)
	e.fillTo(filepath.Join(e.home, "bulk-last.bin"), 8*mib)
	run, err = r2.Reclaim(ctx, Request{Trigger: TriggerManual})
	if err != nil || countFiles(lb) >= before {
		t.Fatalf("last resort: deps %d -> %d: %q %v: %s", before, countFiles(lb), run.Verdict, err, run.Detail)
	}
	t.Logf("last resort: %s", run.Detail)
	if got := e.avail(); got < e.replaceBelow || got >= e.reclaimBelow {
		t.Errorf("last resort left %d free: want the replace threshold %d reached, no more (the comfort target is not a need)", got, e.replaceBelow)
	}
	if !strings.Contains(run.Detail, "pruned only as far as the need") || !strings.Contains(run.Detail, inUseClause) {
		t.Errorf("last-resort detail: %s", run.Detail)
	}
	// Nothing comes back this time: past the window the cache is no longer thrashing.
	advance(RefillWindow + time.Minute)
	r2.CheckRefills(ctx)
	if c := findCond(r2.Conditions(), CondCacheThrashing, "deps"); c == nil || c.Status {
		t.Errorf("a prune that did not refill leaves it thrashing: %+v", c)
	}
}

func findCond(cs []api.Condition, typ, subject string) *api.Condition {
	for i := range cs {
		if cs[i].Type == typ && cs[i].Subject == subject {
			return &cs[i]
		}
	}
	return nil
}

func (e *env) eventWith(cond string) *api.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.events {
		if e.events[i].Fields["condition"] == cond {
			return &e.events[i]
		}
	}
	return nil
}

// The refill rule on hand-made histories.
func TestRefillHistoryRule(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	prune := func(h *RefillHistory, m int, freed, after int64) { h.Pruned(at(m), freed, after, 0) }
	cases := []struct {
		name string
		run  func(h *RefillHistory)
		want bool
	}{
		{"three full refills", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+30), 110)
			}
			h.Expire(at(1000))
		}, true},
		{"half is enough", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+59), 60)
			}
			h.Expire(at(1000))
		}, true},
		{"one of three below half", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+30), 10+100-int64(i)*30)
			}
			h.Expire(at(1000))
		}, false},
		{"refill after the hour does not count", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+61), 110)
			}
			h.Expire(at(1000))
		}, false},
		{"only two prunes", func(h *RefillHistory) {
			for i := range 2 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+30), 110)
			}
		}, false},
		{"a quick re-prune settles the last one with the size before it", func(h *RefillHistory) {
			prune(h, 0, 100, 10)
			prune(h, 20, 100, 10) // 110 before it: refilled
			prune(h, 40, 100, 10) // idem
			h.Observe(at(50), 110)
		}, true},
		{"size never walked", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, -1)
			}
			h.Expire(at(1000))
		}, false},
		{"a cache growing at its own pace before the prune is not refilling", func(h *RefillHistory) {
			for i := range 3 {
				// 100 bytes a minute before and after: 6,000 in the hour, all baseline.
				h.Pruned(at(i*120), 100, 10000, GrowthBaseline(4100, at(i*120-60), 10100, at(i*120)))
				h.Observe(at(i*120+60), 10000+6000)
			}
			h.Expire(at(1000))
		}, false},
		{"a refill above the baseline is one", func(h *RefillHistory) {
			for i := range 3 {
				h.Pruned(at(i*120), 1000, 10, GrowthBaseline(410, at(i*120-60), 1010, at(i*120)))
				h.Observe(at(i*120+30), 10+300+900) // 300 baseline, 900 back
			}
			h.Expire(at(1000))
		}, true},
		{"an open newest prune keeps the verdict of the settled ones", func(h *RefillHistory) {
			for i := range 3 {
				prune(h, i*120, 100, 10)
				h.Observe(at(i*120+30), 110)
			}
			prune(h, 400, 100, 10)
		}, true},
	}
	for _, c := range cases {
		h := &RefillHistory{Name: "c"}
		c.run(h)
		if got := h.Thrashing(); got != c.want {
			t.Errorf("%s: thrashing %v, want %v (%+v)", c.name, got, c.want, h.Prunes)
		}
	}
}

func removeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
