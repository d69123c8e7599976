package retention

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

const inPidNSEnv = "SANDBOXD_RETENTION_IN_PIDNS"

// TestPidReuse: a job's process ends after sandboxd first saw its pid file, and its pid
// goes to an unrelated process; across a manager restart the job is still recognised as
// dead and pruned once old. A control job whose live process is the very one first seen
// (same start ticks), though it neither holds the job's files nor names it, is kept.
// Getting an exact pid needs ns_last_pid without the host's forks racing us, so the test
// re-executes itself in a new PID namespace.
func TestPidReuse(t *testing.T) {
	testenv.RequireRoot(t)
	if os.Getenv(inPidNSEnv) == "" {
		unshare := testenv.RequireCommand(t, "unshare")
		// --mount-proc makes a mount namespace too: it lets go of other tests' FUSE mounts
		// first, or their servers would outlive their unmount while this test runs.
		cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "/bin/sh", "-c",
			testenv.DetachFUSECopies()+"\nexec \"$0\" \"$@\"", os.Args[0],
			"-test.run=^TestPidReuse$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), inPidNSEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in a new pid namespace: %v\n%s", err, out)
		}
		t.Logf("in a new pid namespace:\n%s", out)
		return
	}
	dir := testenv.Tmpfs(t, 64<<20, 0)
	stateDir := t.TempDir()
	now := time.Now()
	reused := makeJob(t, dir, "reusejob", 0, now)
	// A plain child, not startJob's process group: a group keeps its leader's pid in use.
	job := exec.Command("sleep", "300")
	job.Dir = "/"
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill(); job.Wait() })
	pid := job.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "reusejob.pid"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	// The control: a process that is the job's only by first sighting.
	own := makeJob(t, dir, "ownjob", 0, now)
	sleeper := exec.Command("sleep", "300")
	sleeper.Dir = "/"
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "ownjob.pid"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	opts := Options{Sites: []SiteConfig{siteCfg("s", dir)}, State: state.Open(stateDir)}
	h := run(t, opts)
	waitFor(t, "both jobs first seen running", func() bool { s, _ := h.m.Site("s"); return s.RunningJobs == 2 })
	job.Process.Kill()
	job.Wait()
	h.stop() // restart: what was first seen must come back from the state dir

	spawnWithPid(t, pid)
	ageAll(t, dir, append(reused, own...), now.Add(-13*time.Hour))
	opts.State = state.Open(stateDir)
	h = run(t, opts)
	waitFor(t, "the job with the reused pid pruned", func() bool {
		for _, n := range reused {
			if exists(dir, n) {
				return false
			}
		}
		return true
	})
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("the process now holding pid %d is gone: the test proved nothing", pid)
	}
	for _, n := range own {
		if !exists(dir, n) {
			t.Fatalf("%s of the job whose first-seen process lives was pruned", n)
		}
	}
}

// spawnWithPid starts an unrelated `sleep` that gets exactly pid, by writing pid-1 to
// ns_last_pid and forking, retrying when another fork (a Go runtime thread) got there first.
func spawnWithPid(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	for try := 0; try < 200; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatalf("write ns_last_pid: %v", err)
		}
		cmd := exec.Command("sleep", "300")
		cmd.Dir = "/"
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	out, _ := exec.Command("ps", "-eo", "pid,stat,args").CombinedOutput()
	t.Fatalf("could not get pid %d:\n%s", pid, out)
	return nil
}
