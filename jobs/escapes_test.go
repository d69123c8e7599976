package jobs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func startWithEnv(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func escapedLeaks(t *testing.T, f *fixture, clean bool) []api.Leak {
	t.Helper()
	rep, err := f.m.Leaks(context.Background(), clean)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Leak
	for _, l := range rep.Leaks {
		if l.Kind == api.LeakEscaped {
			out = append(out, l)
		}
	}
	return out
}

// Issue 20 item 6: a process outside its job's cgroup that carries the job's
// SANDBOXD_JOB_ID (started by a server outside the job, or moved out) is reported while
// the job runs and after it ended, kind escaped; --clean leaves it running and says why;
// a process naming a job this registry never had (another sandboxd's) is left alone.
func TestLeaksSeeEscapes(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	main := spawn(t, `exec sleep 600`)
	j, err := f.m.Register(api.JobRequest{ID: "esc", PID: main.Process.Pid, TTL: dur(time.Hour)}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	out := startWithEnv(t, api.JobIDEnv+"=esc", api.JobCgroupEnv+"="+j.Cgroup)
	other := startWithEnv(t, api.JobIDEnv+"=esc", api.JobCgroupEnv+"="+filepath.Join(f.root, "elsewhere", "jobs", "esc"))
	stranger := startWithEnv(t, api.JobIDEnv+"=never-here")

	ls := escapedLeaks(t, f, false)
	if len(ls) != 1 || ls[0].PID != out.Process.Pid || !strings.Contains(ls[0].Detail, "outside the job's cgroup") {
		t.Fatalf("escapes while the job runs: %+v (want only %d)", ls, out.Process.Pid)
	}
	if _, err := f.m.End(context.Background(), "esc", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	ls = escapedLeaks(t, f, true)
	if len(ls) != 1 || ls[0].PID != out.Process.Pid || !strings.Contains(ls[0].Detail, "outlives the job") ||
		ls[0].Cleaned || !strings.Contains(ls[0].Error, "left running") {
		t.Fatalf("escapes after the job ended, with clean: %+v", ls)
	}
	for _, p := range []*exec.Cmd{out, other, stranger} {
		if !alive(p.Process.Pid) {
			t.Errorf("process %d was ended by the leak check", p.Process.Pid)
		}
	}
	if n := f.m.LastLeaks()[api.LeakEscaped]; n != 1 {
		t.Errorf("sandboxd_jobs_leaked{kind=escaped} = %d", n)
	}
}
