package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestKeepEndedMaxDropsTheOldestFirst: with keep_ended_max = 3, six jobs (real processes
// in real cgroups) registered and ended one after the other leave the last three listed
// as soon as each end returns, the first three dropped and answered "ended and forgotten"
// by that limit. An ended job's id registered again and ended is the newest: the next end
// drops the oldest still listed, not the one re-registered, and the count of ended jobs
// is not thrown off by the entry the re-registration replaced.
func TestKeepEndedMaxDropsTheOldestFirst(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxEnded = 3; o.KeepEnded = time.Hour })
	run := func(id string) int {
		t.Helper()
		p := spawn(t, `exec sleep 600`)
		if _, err := f.m.Register(api.JobRequest{ID: id, PID: p.Process.Pid}, Caller{}); err != nil {
			t.Fatal(err)
		}
		if v, err := f.m.End(context.Background(), id, api.ReasonDeleted, true); err != nil || v.State != api.JobKilled {
			t.Fatalf("end %s: %+v %v", id, v, err)
		}
		return p.Process.Pid
	}
	listed := func(want ...string) {
		t.Helper()
		var got []string
		for _, j := range f.m.List() {
			got = append(got, j.ID)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("listed %v, want %v", got, want)
		}
	}
	dropped := func(id string) {
		t.Helper()
		if err := f.m.NotFound(id); !strings.Contains(fmt.Sprint(err), "ended and forgotten") || !strings.Contains(fmt.Sprint(err), "keep_ended_max = 3") {
			t.Errorf("%s: %v, want ended and forgotten by keep_ended_max = 3", id, err)
		}
	}
	for i := range 6 {
		run(fmt.Sprintf("j%d", i))
	}
	listed("j3", "j4", "j5")
	for _, id := range []string{"j0", "j1", "j2"} {
		dropped(id)
	}
	again := run("j3") // the ended j3 is replaced by a new one, ended now
	run("j6")
	listed("j3", "j5", "j6")
	dropped("j4")
	if j, ok := f.m.Get("j3"); !ok || j.PID != again {
		t.Errorf("j3 listed: %+v, want the one registered again (pid %d)", j, again)
	}
}

// TestEndedIndexBoundedWhenIDsAreReused: a runner that reuses one job id, with an older
// ended job still listed ahead of it, leaves one replaced entry per registration in the
// index of ended jobs; they are dropped once they are most of it, so the index stays
// bounded by the listed ended jobs, not by the registrations of the last keep_ended.
func TestEndedIndexBoundedWhenIDsAreReused(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxEnded = 1024; o.KeepEnded = time.Hour })
	run := func(id string) {
		t.Helper()
		p := spawn(t, `exec sleep 600`)
		if _, err := f.m.Register(api.JobRequest{ID: id, PID: p.Process.Pid}, Caller{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.m.End(context.Background(), id, api.ReasonDeleted, true); err != nil {
			t.Fatal(err)
		}
	}
	run("first")
	for range 150 {
		run("again")
	}
	f.m.mu.Lock()
	n, listed := len(f.m.ended)-f.m.endedHead, f.m.endedN
	f.m.mu.Unlock()
	if listed != 2 || n > listed+65 {
		t.Errorf("index of ended jobs: %d entries for %d listed, want 2 listed and at most 67 entries", n, listed)
	}
	if _, ok := f.m.Get("first"); !ok {
		t.Error("the first ended job was dropped")
	}
}
