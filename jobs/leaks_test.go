package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// An unleased process named by a site's pid file, alive past unleased_max, is a leak;
// --clean ends it (with the children it forked) and still reports it. A young one is not.
func TestUnleasedProcessLeak(t *testing.T) {
	var files []PidFile
	var clock stoppedClock
	f := newFixture(t, func(o *Options) {
		o.UnleasedMax = 300 * time.Millisecond
		o.Grace = 200 * time.Millisecond
		o.PidFiles = func() []PidFile { return files }
		o.Now = clock.Now
	})
	kids := filepath.Join(t.TempDir(), "kids")
	old := spawn(t, `sh -c 'echo $$ > `+kids+`; exec sleep 600' & exec sleep 600`)
	child := readPids(t, kids, 1)[0]
	time.Sleep(400 * time.Millisecond)
	young := spawn(t, `exec sleep 600`)
	// Ages are the files': a1b2.pid written 400 ms ago, c3d4.pid just now — on a clock
	// stopped for the checks, so that a loaded machine's delays do not age c3d4.pid past
	// unleased_max between here and the checks.
	now := clock.Stop()
	files = []PidFile{{Site: "aura-bg", Job: "a1b2", PID: old.Process.Pid, FileMtime: now.Add(-400 * time.Millisecond)},
		{Site: "aura-bg", Job: "c3d4", PID: young.Process.Pid, FileMtime: now}}
	rep, err := f.m.Leaks(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].Kind != api.LeakUnleased || rep.Leaks[0].PID != old.Process.Pid || rep.Leaks[0].Job != "a1b2" {
		t.Fatalf("leaks = %+v, want the old unleased process only", rep.Leaks)
	}
	rep, err = f.m.Leaks(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || !rep.Leaks[0].Cleaned {
		t.Fatalf("leaks --clean = %+v, want the leak reported and cleaned", rep.Leaks)
	}
	if alive(old.Process.Pid) || alive(child) {
		t.Errorf("after --clean: process %d alive %v, its child %d alive %v", old.Process.Pid, alive(old.Process.Pid), child, alive(child))
	}
	if !alive(young.Process.Pid) {
		t.Error("--clean ended a process younger than unleased_max")
	}
	files = files[1:]
	if rep, _ := f.m.Leaks(context.Background(), false); len(rep.Leaks) != 0 {
		t.Errorf("after cleaning: %+v", rep.Leaks)
	}
}

// A non-empty cgroup under the jobs root that the registry does not know is a leak;
// --clean kills it and removes the cgroup.
func TestUnknownCgroupLeak(t *testing.T) {
	f := newFixture(t, nil)
	stray := filepath.Join(f.root, "jobs", "stray")
	spawned := time.Now()
	p := spawn(t, `exec sleep 600`)
	// Run removes empty strays at start: retry until the process is in.
	waitFor(t, time.Minute, "a stray cgroup with a process", func() bool {
		os.MkdirAll(stray, 0o755)
		return os.WriteFile(filepath.Join(stray, "cgroup.procs"), []byte(strconv.Itoa(p.Process.Pid)), 0) == nil
	})
	// Its age is its oldest process's (issue 23: it said 0 for a cgroup 67 s old).
	var age float64
	waitFor(t, time.Minute, "the stray cgroup's age to count", func() bool {
		if rep, _ := f.m.Leaks(context.Background(), false); len(rep.Leaks) == 1 {
			age = rep.Leaks[0].AgeSeconds
		}
		return age > 0
	})
	if limit := time.Since(spawned).Seconds() + 0.5; age > limit {
		t.Errorf("age %.2fs of a cgroup whose process started %.2fs ago", age, limit-0.5)
	}
	rep, err := f.m.Leaks(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].Kind != api.LeakUnknownCgroup || rep.Leaks[0].Processes != 1 || !rep.Leaks[0].Cleaned {
		t.Fatalf("leaks = %+v, want the stray cgroup, cleaned", rep.Leaks)
	}
	if alive(p.Process.Pid) {
		t.Error("the stray cgroup's process survived --clean")
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray cgroup not removed: %v", err)
	}
}

// The age is the pid file's, not the process's: an old process named by a file written
// just now is no leak; the same file, older than unleased_max but written long after the
// process started, is reported and left running by --clean (the file may name a process it
// was not written for).
func TestUnleasedAgedByTheFile(t *testing.T) {
	var files []PidFile
	var clock stoppedClock
	f := newFixture(t, func(o *Options) {
		o.UnleasedMax = 300 * time.Millisecond
		o.Grace = 200 * time.Millisecond
		o.PidFileSlack = 100 * time.Millisecond
		o.PidFiles = func() []PidFile { return files }
		o.Now = clock.Now
	})
	old := spawn(t, `exec sleep 600`)
	time.Sleep(400 * time.Millisecond)
	// The checks run on a stopped clock: the file is as old at the check as written here,
	// however long a loaded machine takes to get there. The process's own age is real
	// (from /proc): the sleeps make it at least that old.
	files = []PidFile{{Site: "aura-bg", Job: "fresh", PID: old.Process.Pid, FileMtime: clock.Stop()}}
	if rep, _ := f.m.Leaks(context.Background(), true); len(rep.Leaks) != 0 {
		t.Fatalf("a file written now naming a process that ran past unleased_max: %+v, want no leak", rep.Leaks)
	}
	// Written 400 ms after the process started (past a slack of 100 ms), 350 ms ago.
	time.Sleep(400 * time.Millisecond)
	files = []PidFile{{Site: "aura-bg", Job: "late", PID: old.Process.Pid, FileMtime: clock.Stop().Add(-350 * time.Millisecond)}}
	rep, err := f.m.Leaks(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].Cleaned || !strings.Contains(rep.Leaks[0].Error, "left running") {
		t.Fatalf("leaks --clean = %+v, want the leak reported and left running", rep.Leaks)
	}
	if !alive(old.Process.Pid) {
		t.Fatal("--clean ended a process that started long before its pid file was written")
	}
}

// stoppedClock is the manager's clock for a leak check whose ages must not grow while a
// loaded machine gets to it: the wall clock until Stop, then the instant Stop returned.
type stoppedClock struct{ at atomic.Int64 }

// Stop stops the clock at the current time (again, if it was stopped) and returns it.
func (c *stoppedClock) Stop() time.Time {
	now := time.Now()
	c.at.Store(now.UnixNano())
	return now
}

func (c *stoppedClock) Now() time.Time {
	if at := c.at.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Now()
}
