package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// fillUp writes a file in dir until the filesystem refuses (ENOSPC) and returns its path.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "fill")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return p
		}
	}
}

// Issue 20 item 2: the registry is a journal in registry_dir (a tmpfs here, filled to
// 100%). A registration that cannot be written is refused with 503 state_unavailable
// before any process is moved, never answered 201 and forgotten; a heartbeat is renewed in
// memory and says it was not written; once there is room again, registrations are written
// and a restarted Manager finds every job.
func TestRegistryFullRefuses(t *testing.T) {
	reg := testenv.Tmpfs(t, 64<<10, 0)
	f := newFixture(t, func(o *Options) { o.RegistryDir = reg; o.DefaultTTL = time.Hour })
	before := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "before", PID: before.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	// Pad the journal to a page boundary with blank lines (which a reader skips), so that
	// its next record needs a page the full tmpfs does not have.
	jpath := filepath.Join(reg, journalName)
	st, _ := os.Stat(jpath)
	if pad := (4096 - st.Size()%4096) % 4096; pad > 0 {
		jf, _ := os.OpenFile(jpath, os.O_WRONLY|os.O_APPEND, 0)
		jf.Write([]byte(strings.Repeat("\n", int(pad))))
		jf.Close()
	}
	f.m.mu.Lock()
	f.m.journal.size = (st.Size() + 4095) / 4096 * 4096
	f.m.mu.Unlock()
	fill := fillUp(t, reg)

	refused := spawn(t, `exec sleep 600`)
	cgBefore, _ := os.ReadFile("/proc/" + strconv.Itoa(refused.Process.Pid) + "/cgroup")
	_, err := f.m.Register(api.JobRequest{ID: "refused", PID: refused.Process.Pid}, Caller{})
	if problemCode(err) != api.CodeStateUnavailable || !strings.Contains(err.Error(), reg) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("registration on a full registry: %v, want state_unavailable naming %s and ENOSPC", err, reg)
	}
	if api.CodeStateUnavailable.Status() != 503 || api.CodeStateUnavailable.ExitCode() != 75 {
		t.Errorf("state_unavailable is %d / exit %d, want 503 / 75", api.CodeStateUnavailable.Status(), api.CodeStateUnavailable.ExitCode())
	}
	if cg, _ := os.ReadFile("/proc/" + strconv.Itoa(refused.Process.Pid) + "/cgroup"); string(cg) != string(cgBefore) {
		t.Errorf("a refused registration moved the process: cgroup %q, was %q", cg, cgBefore)
	}
	if _, ok := f.m.Get("refused"); ok {
		t.Error("a refused registration is listed")
	}
	if r := f.m.Summary().Registry; r == nil || r.Dir != reg || !strings.Contains(r.Error, "no space left") {
		t.Errorf("status registry = %+v, want the reason", r)
	}
	v, err := f.m.Heartbeat("before", 0)
	if err != nil || len(v.Warnings) == 0 || !strings.Contains(v.Warnings[0], "memory only") {
		t.Errorf("heartbeat on a full registry: %+v %v, want renewed with a warning", v.Warnings, err)
	}

	os.Remove(fill)
	if _, err := f.m.Register(api.JobRequest{ID: "after", PID: refused.Process.Pid}, Caller{}); err != nil {
		t.Fatalf("registration once there is room: %v", err)
	}
	if r := f.m.Summary().Registry; r.Error != "" || r.JournalBytes == 0 {
		t.Errorf("status registry after room came back = %+v", r)
	}
	f.shutdown()
	f.start()
	for _, id := range []string{"before", "after"} {
		if v, ok := f.m.Get(id); !ok || v.State != api.JobRunning {
			t.Errorf("after a restart, %s = %+v, %v; want running", id, v, ok)
		}
	}
}

// A crash in the middle of a write leaves a torn last line: the journal is read up to it,
// and the next record starts on a line of its own.
func TestRegistryTornLine(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, func(o *Options) { o.RegistryDir = dir; o.DefaultTTL = time.Hour })
	p := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "kept", PID: p.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(dir, journalName)
	doc, _ := os.ReadFile(jpath)
	f.shutdown()
	os.WriteFile(jpath, append(doc, `{"op":"hb","id":"kept","lease_b`...), 0o600)
	f.start()
	if v, ok := f.m.Get("kept"); !ok || v.State != api.JobRunning {
		t.Fatalf("after a torn line: kept = %+v, %v", v, ok)
	}
	if _, err := f.m.Heartbeat("kept", 0); err != nil {
		t.Fatal(err)
	}
	recs, bad := parseJournal(must(os.ReadFile(jpath)))
	if bad != 0 || len(recs) < 2 {
		t.Errorf("journal after a torn line and a heartbeat: %d records, %d bad", len(recs), bad)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Issue 20 item 3: ended jobs are kept for keep_ended, at most keep_ended_max of them (the
// oldest dropped first); one dropped answers 404 saying it ended and was forgotten, and
// by which limit, where an id never registered answers "no job".
func TestKeepEndedMax(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxEnded = 2; o.KeepEnded = time.Hour })
	for _, id := range []string{"first", "second", "third"} {
		p := spawn(t, `exec sleep 600`)
		if _, err := f.m.Register(api.JobRequest{ID: id, PID: p.Process.Pid}, Caller{}); err != nil {
			t.Fatal(err)
		}
		if v, err := f.m.End(context.Background(), id, api.ReasonDeleted, true); err != nil || v.State != api.JobKilled {
			t.Fatalf("end %s: %+v %v", id, v, err)
		}
	}
	// The cap is applied when the registry next changes (a registration, a tick).
	waitFor(t, time.Minute, "the oldest ended job to be dropped", func() bool { _, ok := f.m.Get("first"); return !ok })
	for _, id := range []string{"second", "third"} {
		if _, ok := f.m.Get(id); !ok {
			t.Errorf("ended job %s dropped though within keep_ended_max", id)
		}
	}
	err := f.m.NotFound("first")
	if problemCode(err) != api.CodeNotFound || !strings.Contains(err.Error(), "ended and forgotten") || !strings.Contains(err.Error(), "keep_ended_max = 2") {
		t.Errorf("404 of a dropped job: %v", err)
	}
	if _, err := f.m.Heartbeat("first", 0); !strings.Contains(fmt.Sprint(err), "ended and forgotten") {
		t.Errorf("heartbeat of a dropped job: %v", err)
	}
	if err := f.m.NotFound("never"); !strings.Contains(err.Error(), `no job "never"`) {
		t.Errorf("404 of an unknown id: %v", err)
	}
}
