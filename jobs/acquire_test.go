package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// heldCond is the JobRegistryHeld condition of m, nil when it is not raised.
func heldCond(m *Manager) *api.Condition {
	for _, c := range m.Conditions() {
		if c.Type == api.CondJobRegistryHeld {
			return &c
		}
	}
	return nil
}

// Two daemons on one registry_dir (a handover: the new one started while the old one still
// serves). The new Manager waits for the registry rather than refusing for its life.
// While the old one holds it, every job call of the new one is refused 503
// state_unavailable naming the registry (never a 404 nor an empty leak check that would
// take the old one's jobs for leaks), Holds keeps every site job's files, and
// JobRegistryHeld is raised: a warning, then critical with one ERROR line once
// RegistryWait passed. Once the old one stops, the new one takes the registry at once,
// adopts the old one's running job (its process still in its cgroup, ended by the new
// one on request) and registers jobs of its own.
func TestRegistryHeldIsWaitedFor(t *testing.T) {
	old := newFixture(t, func(o *Options) { o.DefaultTTL = time.Hour })
	p := spawn(t, `exec sleep 600`)
	if _, err := old.m.Register(api.JobRequest{ID: "before", Site: "s", PID: p.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	if !RegistryHeld(old.opts.RegistryDir) {
		t.Fatalf("RegistryHeld(%s) = false while a Manager runs on it", old.opts.RegistryDir)
	}

	var logs testenv.SyncBuffer
	opts := old.opts
	opts.Logger, opts.RegistryWait = slog.New(slog.NewTextHandler(&logs, nil)), time.Second
	m := New(opts)
	if c := heldCond(m); c == nil || !c.Status || c.Reason != "Waiting" || c.Severity != api.HealthWarning || c.Subject != opts.RegistryDir {
		t.Fatalf("JobRegistryHeld while the old daemon holds the registry = %+v, want a warning (Waiting) on %s", c, opts.RegistryDir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	q := spawn(t, `exec sleep 600`)
	cgBefore, _ := os.ReadFile("/proc/" + strconv.Itoa(q.Process.Pid) + "/cgroup")
	refused := func(what string, err error) {
		t.Helper()
		if problemCode(err) != api.CodeStateUnavailable || !strings.Contains(err.Error(), opts.RegistryDir) {
			t.Errorf("%s while another daemon holds the registry: %v, want state_unavailable naming %s", what, err, opts.RegistryDir)
		}
	}
	_, err := m.Register(api.JobRequest{ID: "early", PID: q.Process.Pid}, Caller{})
	refused("a registration", err)
	if cg, _ := os.ReadFile("/proc/" + strconv.Itoa(q.Process.Pid) + "/cgroup"); string(cg) != string(cgBefore) {
		t.Errorf("a refused registration moved the process: cgroup %q, was %q", cg, cgBefore)
	}
	_, err = m.Heartbeat("before", 0)
	refused("a heartbeat of the old daemon's job", err)
	_, err = m.End(ctx, "before", api.ReasonDeleted, false)
	refused("an end of the old daemon's job", err)
	_, _, err = m.Page("", 10, nil)
	refused("a list", err)
	_, err = m.Leaks(ctx, true)
	refused("a leak check with clean", err)
	if !m.Holds("s", "anything") {
		t.Error("Holds = false while the registry is another daemon's: retention would prune a running job's files")
	}

	// The condition turns critical a moment before the ERROR line is written: wait for both.
	waitFor(t, time.Minute, "JobRegistryHeld to turn critical once RegistryWait passed, and its ERROR line", func() bool {
		c := heldCond(m)
		return c != nil && c.Reason == "Stuck" && c.Severity == api.HealthCritical && strings.Contains(logs.String(), "level=ERROR")
	})
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "still held by another sandboxd after 1s") {
		t.Errorf("the stuck wait was logged %d times at ERROR, want once saying how long:\n%s", n, logs.String())
	}
	select {
	case <-m.Loaded():
		t.Fatal("Loaded closed while another daemon holds the registry")
	default:
	}
	if !alive(p.Process.Pid) {
		t.Fatal("the old daemon's job was ended while the new one waited")
	}

	old.shutdown() // the old daemon stops: its Run lets go of the registry
	select {
	case <-m.Loaded():
	case <-time.After(30 * time.Second):
		t.Fatalf("the registry was not taken within 30s of the old daemon's stop:\n%s", logs.String())
	}
	if RegistryHeld(opts.RegistryDir) != true {
		t.Error("RegistryHeld = false while the new Manager holds the registry")
	}
	if c := heldCond(m); c != nil {
		t.Errorf("JobRegistryHeld still raised once the registry was taken: %+v", c)
	}
	j, ok := m.Get("before")
	if !ok || j.State != api.JobRunning || j.Cgroup != filepath.Join(old.root, "jobs", "before") {
		t.Fatalf("the old daemon's job after the takeover = %+v %v, want running in its cgroup", j, ok)
	}
	procs, _ := os.ReadFile(filepath.Join(j.Cgroup, "cgroup.procs"))
	if !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(p.Process.Pid)+"\n") {
		t.Errorf("the adopted job's process %d is not in its cgroup: %q", p.Process.Pid, procs)
	}
	if m.Holds("s", "anything") || !m.Holds("s", "before") {
		t.Error("Holds after the takeover does not follow the registry")
	}
	if _, err := m.Register(api.JobRequest{ID: "after", PID: q.Process.Pid}, Caller{}); err != nil {
		t.Fatalf("a registration once the registry is taken: %v", err)
	}
	ectx, ecancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ecancel()
	if v, err := m.End(ectx, "before", api.ReasonDeleted, true); err != nil || v.State != api.JobKilled {
		t.Fatalf("end of the adopted job: %+v %v", v, err)
	}
	waitFor(t, time.Minute, "the adopted job's process to end", func() bool { return !alive(p.Process.Pid) })
}

// A Manager that stops while another daemon still holds the registry leaves it alone: it
// never loaded it, so it writes nothing and removes no cgroup of the other's jobs.
func TestRegistryHeldStopWhileWaiting(t *testing.T) {
	old := newFixture(t, func(o *Options) { o.DefaultTTL = time.Hour })
	p := spawn(t, `exec sleep 600`)
	if _, err := old.m.Register(api.JobRequest{ID: "before", PID: p.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(old.opts.RegistryDir, journalName)
	was, _ := os.ReadFile(journal)
	m := New(old.opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	cancel()
	<-done
	if now, _ := os.ReadFile(journal); string(now) != string(was) {
		t.Errorf("a Manager that never held the registry wrote it:\nwas %q\nnow %q", was, now)
	}
	if j, ok := old.m.Get("before"); !ok || j.State != api.JobRunning || !alive(p.Process.Pid) {
		t.Errorf("the holder's job after the waiter stopped: %+v %v", j, ok)
	}
	if _, err := os.Stat(filepath.Join(old.root, "jobs", "before")); err != nil {
		t.Errorf("the holder's job cgroup: %v", err)
	}
}
