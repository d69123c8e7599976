package retention

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// jobSuffixes are the seven entries a launcher leaves per command; the last is a directory.
var jobSuffixes = []string{".pid", ".status", ".out", ".err", ".launch.sh", ".callback.json", ""}

// deadPid is a pid no process can have (above pid_max).
func deadPid(t testing.TB) int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n + 1
}

// makeJob writes a job's seven entries with mtime at, and returns their names.
func makeJob(t testing.TB, dir, id string, pid int, at time.Time) []string {
	t.Helper()
	var names []string
	for _, suf := range jobSuffixes {
		p := filepath.Join(dir, id+suf)
		switch suf {
		case "":
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "inner"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		case ".pid":
			if err := os.WriteFile(p, []byte(fmt.Sprintf("%d\n", pid)), 0o644); err != nil {
				t.Fatal(err)
			}
		case ".launch.sh":
			if err := os.WriteFile(p, []byte("#!/bin/sh\nsleep 300\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, []byte("some output\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, id+suf)
	}
	ageAll(t, dir, names, at)
	return names
}

func ageAll(t testing.TB, dir string, names []string, at time.Time) {
	t.Helper()
	for _, n := range names {
		if exists(dir, n+"/inner") { // a job's directory: its contents age with it
			if err := os.Chtimes(filepath.Join(dir, n, "inner"), at, at); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(filepath.Join(dir, n), at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// startJob runs `sh <id>.launch.sh > <id>.out` in dir, writes the pid file, and ends the
// process when the test ends.
func startJob(t testing.TB, dir, id string) *exec.Cmd {
	t.Helper()
	out, err := os.OpenFile(filepath.Join(dir, id+".out"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("sh", id+".launch.sh")
	cmd.Dir, cmd.Stdout = dir, out
	// Its own process group, so the script's `sleep` goes with it and nothing is left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	if err := os.WriteFile(filepath.Join(dir, id+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd
}

type eventLog struct {
	mu  sync.Mutex
	evs []api.Event
}

func (l *eventLog) add(e api.Event) { l.mu.Lock(); l.evs = append(l.evs, e); l.mu.Unlock() }
func (l *eventLog) kinds(kind string) []api.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.Event
	for _, e := range l.evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

type harness struct {
	m      *Manager
	events *eventLog
	cancel context.CancelFunc
	done   chan error
}

// run starts a manager on opts (events recorded, fast intervals unless set) and stops it
// when the test ends.
func run(t testing.TB, opts Options) *harness {
	t.Helper()
	h := &harness{events: &eventLog{}, done: make(chan error, 1)}
	opts.Events = h.events.add
	if opts.LivenessInterval == 0 {
		opts.LivenessInterval = 50 * time.Millisecond
	}
	if opts.State == nil {
		opts.State = state.Open(t.TempDir())
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- m.Run(ctx) }()
	t.Cleanup(h.stop)
	waitFor(t, "the first scan", func() bool {
		for _, s := range m.siteList() {
			select {
			case <-s.started:
			default:
				return false
			}
		}
		return true
	})
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
	h.cancel = nil
}

// waitFor polls cond for up to a generous minute: no timed assertions, only patience.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, what, cond)
}

func exists(dir, name string) bool {
	_, err := os.Lstat(filepath.Join(dir, name))
	return err == nil
}

func siteCfg(name, dir string) SiteConfig {
	return SiteConfig{Name: name, Path: dir, MaxAge: 12 * time.Hour, MinAge: 15 * time.Minute}
}

// drainAll prunes s in drain batches until a batch claims nothing, as drainLoop does, and
// adds the batches up (Problem: the first one given). One batch is not the whole backlog:
// it stops taking jobs once drainBatchTime has passed (after its first job), which a
// loaded machine reaches after any job.
func drainAll(t testing.TB, s *site) PruneResult {
	t.Helper()
	total := PruneResult{Site: s.name, ByReason: map[string]int64{}}
	for i := 0; ; i++ {
		r, claimed := s.pruneClaimed(context.Background(), 1000, pruneDrain)
		total.Files += r.Files
		total.Bytes += r.Bytes
		total.Jobs = append(total.Jobs, r.Jobs...)
		for k, v := range r.ByReason {
			total.ByReason[k] += v
		}
		total.Pending, total.Observed = r.Pending, total.Observed || r.Observed
		if total.Problem == "" {
			total.Problem = r.Problem
		}
		total.errs = append(total.errs, r.errs...)
		if claimed == 0 {
			return total
		}
		if i == 1000 {
			t.Fatalf("the drain still claims jobs after %d batches: %+v", i, total)
		}
	}
}
