package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func jobState(t *testing.T, sock, id string) api.Job {
	t.Helper()
	r := sandboxd(t, nil, "jobs", "list", "--socket", sock, "--json")
	var p api.JobsPage
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("jobs list --json: %v: %s %s", err, r.stdout, r.stderr)
	}
	for _, j := range p.Jobs {
		if j.ID == id {
			return j
		}
	}
	return api.Job{}
}

func waitUntil(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	testenv.Eventually(t, d, what, f)
}

func alivePid(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

func readPidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitUntil(t, time.Minute, "pid file "+path, func() bool {
		b, _ := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	return pid
}

func startBG(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// sandboxd run puts CMD (and a setsid grandchild) in the job's cgroup; a runner that
// heartbeats keeps it past its ttl; once the runner is SIGKILLed, the lease ends the job
// and every process of it. sandboxd itself, SIGKILLed and restarted mid-lease, finds the
// job again and still ends it on time; a lease that lapsed while it was down ends at start.
func TestRunJobsAndRestart(t *testing.T) {
	dir := openTempDir(t)
	cfg, root := jobsSiteConfig(t)
	daemon, sock, _ := serveDaemon(t, dir, cfg)
	env := []string{api.SocketEnv + "=" + sock}
	pids := t.TempDir()

	// A runner: starts the job with sandboxd run, then beats for it every 200ms.
	runner := exec.Command("/bin/sh", "-c", fmt.Sprintf(`%s run --id crash --site s --ttl 4s -- sh -c 'setsid sh -c "echo \$\$ > %s/grand; exec sleep 600" & echo $$ > %s/cmd; exec sleep 600' &
while :; do %s jobs heartbeat crash >/dev/null 2>&1; sleep 0.2; done`, binary, pids, pids, binary))
	runner.Env = append(os.Environ(), env...)
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Process.Kill(); runner.Wait() })
	cmdPid, grand := readPidFile(t, pids+"/cmd"), readPidFile(t, pids+"/grand")
	procs, _ := os.ReadFile(filepath.Join(root, "jobs", "crash", "cgroup.procs"))
	for _, p := range []int{cmdPid, grand} {
		if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(p)+" ") {
			t.Errorf("process %d is not in the job's cgroup (cgroup.procs %q)", p, procs)
		}
	}
	// The runner's heartbeats keep it past its ttl: 25 of them, each at least 0.2 s after
	// the last, span more than the 4 s lease. Counted, not timed: a loaded machine only
	// makes the wait longer (a lease lapses only after 4 s without a heartbeat). The ttl
	// leaves the runner room: each beat is a fork and exec of sandboxd, which took up to
	// 1.5 s on this shared machine under load (TestStallGrace lost a job to that with 2 s).
	waitUntil(t, 60*time.Second, "25 heartbeats of the running job", func() bool {
		j := jobState(t, sock, "crash")
		if j.State != api.JobRunning {
			t.Fatalf("a heartbeating job ended: %+v", j)
		}
		return j.Heartbeats >= 25
	})
	// sandboxd run sends no heartbeat of its own: only the runner's count.
	runner.Process.Kill() // the runner crashes; its job must end by the lease
	runner.Wait()
	waitUntil(t, 60*time.Second, "the crashed runner's job to end", func() bool { return jobState(t, sock, "crash").State == api.JobKilled })
	if j := jobState(t, sock, "crash"); j.Reason != api.ReasonLeaseExpired {
		t.Errorf("reason %q", j.Reason)
	}
	for _, p := range []int{cmdPid, grand} {
		if alivePid(p) {
			t.Errorf("process %d outlived its job", p)
		}
	}

	// Restart mid-lease: two jobs, sandboxd SIGKILLed.
	long, short := startBG(t, "sleep", "600"), startBG(t, "sleep", "600")
	for _, reg := range []struct {
		id  string
		pid int
		ttl string
	}{{"long", long.Process.Pid, "8s"}, {"short", short.Process.Pid, "1s"}} {
		body := fmt.Sprintf(`{"id": %q, "pid": %d, "ttl": %q}`, reg.id, reg.pid, reg.ttl)
		out, err := exec.Command("curl", "-sS", "--unix-socket", sock, "http://sandboxd/v1/jobs", "-d", body).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"state":"running"`) {
			t.Fatalf("register %s: %v %s", reg.id, err, out)
		}
	}
	daemon.Process.Signal(syscall.SIGKILL)
	daemon.Wait()
	time.Sleep(1500 * time.Millisecond) // short's lease lapses while no daemon runs
	if !alivePid(short.Process.Pid) {
		t.Fatal("a job ended while no daemon ran")
	}
	_, sock, logs := serveDaemon(t, dir, cfg)
	waitUntil(t, time.Minute, "short, lapsed while sandboxd was down, to end at start", func() bool { return jobState(t, sock, "short").State == api.JobKilled })
	if j := jobState(t, sock, "long"); j.State != api.JobRunning {
		t.Fatalf("after the restart, long = %+v; logs:\n%s", j, logs.String())
	}
	waitUntil(t, 60*time.Second, "long's lease to lapse after the restart", func() bool { return jobState(t, sock, "long").State == api.JobKilled })
	if alivePid(long.Process.Pid) || alivePid(short.Process.Pid) {
		t.Error("a job's process survived its lease across the restart")
	}
	if r := sandboxd(t, env, "status"); r.code != 0 || !strings.Contains(r.stdout, "JOBS\n  0 running") {
		t.Errorf("status does not show jobs: %d %s", r.code, r.stdout)
	}
}

// sandboxd jobs leaks: 0 with nothing leaked; 1 for an unleased process a site's pid file
// names, alive past unleased_max; 1 again with --clean, which ends it; 69 with the daemon down.
func TestJobsLeaksExitCodes(t *testing.T) {
	root := testenv.CgroupRoot(t)
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	site := filepath.Join(mnt, "site")
	os.Mkdir(site, 0o755)
	cfg := fmt.Sprintf("[[site]]\nname = \"s\"\npath = %q\n[[filesystem]]\npath = %q\nreclaim_below = \"1MiB\"\nreplace_below = \"512KiB\"\nreserve = \"0\"\n[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\nunleased_max = \"1s\"\n",
		site, mnt, root)
	daemon, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	env := []string{api.SocketEnv + "=" + sock}
	if r := sandboxd(t, env, "jobs", "leaks"); r.code != 0 {
		t.Fatalf("no leaks: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	// A detached launcher's job: pid file, output, and a process in its command line.
	leaker := startBG(t, "sleep", "600")
	os.WriteFile(filepath.Join(site, "a1b2.pid"), []byte(strconv.Itoa(leaker.Process.Pid)+"\n"), 0o644)
	os.WriteFile(filepath.Join(site, "a1b2.out"), []byte("x"), 0o644)
	waitUntil(t, time.Minute, "the leak check to find the unleased process", func() bool {
		return sandboxd(t, env, "jobs", "leaks").code == 1
	})
	r := sandboxd(t, env, "jobs", "leaks", "--json")
	var rep api.LeaksReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || len(rep.Leaks) != 1 || rep.Leaks[0].Kind != api.LeakUnleased || rep.Leaks[0].PID != leaker.Process.Pid {
		t.Fatalf("leaks --json: exit %d, %+v (%v)", r.code, rep, err)
	}
	r = sandboxd(t, env, "jobs", "leaks", "--clean")
	if r.code != 1 || !strings.Contains(r.stdout, "ended") {
		t.Errorf("leaks --clean: exit %d (want 1: it had leaked), %s %s", r.code, r.stdout, r.stderr)
	}
	waitUntil(t, time.Minute, "the leaked process to be gone", func() bool { return !alivePid(leaker.Process.Pid) })
	if r := sandboxd(t, env, "jobs", "leaks"); r.code != 0 {
		t.Errorf("after --clean: exit %d, %s", r.code, r.stdout)
	}
	daemon.Process.Signal(syscall.SIGTERM)
	daemon.Wait()
	if r := sandboxd(t, env, "jobs", "leaks"); r.code != 69 {
		t.Errorf("daemon down: exit %d, want 69; %s", r.code, r.stderr)
	}
}

// sandboxd run's exit status is CMD's; a refusal of the launch check or of the
// registration exits with §3's status and its detail on stderr.
func TestRunExitStatus(t *testing.T) {
	cfg, _ := jobsSiteConfig(t)
	_, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	env := []string{api.SocketEnv + "=" + sock}
	if r := sandboxd(t, env, "run", "--id", "seven", "--", "sh", "-c", "exit 7"); r.code != 7 || !strings.Contains(r.stderr, "job seven") {
		t.Errorf("run -- sh -c 'exit 7': exit %d, stderr %q", r.code, r.stderr)
	}
	waitUntil(t, time.Minute, "the exited job to be seen", func() bool { return jobState(t, sock, "seven").State == api.JobEnded })
	// sandboxd's own refusals exit 125 (CONTRACT §9 v1.2, issue 20 item 5), the code and
	// detail on stderr and in --problem-file: a command's own 73 is never read as disk_full.
	if r := sandboxd(t, env, "run", "--site", "nope", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "nope") {
		t.Errorf("unknown site: exit %d, stderr %q", r.code, r.stderr)
	}
	pf := filepath.Join(t.TempDir(), "problem.json")
	if r := sandboxd(t, env, "run", "--need-bytes", "1GiB", "--problem-file", pf, "--", "true"); r.code != 125 ||
		!strings.Contains(r.stderr, "disk_full") && !strings.Contains(r.stderr, "replace_sandbox") {
		t.Errorf("a need above the disk: exit %d, stderr %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(pf); !strings.Contains(string(b), `"code": "disk_full"`) && !strings.Contains(string(b), `"code": "replace_sandbox"`) {
		t.Errorf("--problem-file: %s", b)
	}
	if r := sandboxd(t, env, "run", "--", "sh", "-c", "exit 73"); r.code != 73 {
		t.Errorf("a command's own 73: exit %d", r.code)
	}
	busy := exec.Command(binary, "run", "--id", "dup", "--", "sleep", "600")
	busy.Env = append(os.Environ(), env...)
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	waitUntil(t, time.Minute, "dup to run", func() bool { return jobState(t, sock, "dup").State == api.JobRunning })
	if r := sandboxd(t, env, "jobs", "heartbeat", "dup"); r.code != 0 || !strings.Contains(r.stdout, "job dup: running, lease until") || strings.Contains(r.stdout, "processes") {
		t.Errorf("jobs heartbeat of a running job: exit %d, %q (no process count: the answer does not count them)", r.code, r.stdout)
	}
	if r := sandboxd(t, env, "jobs", "heartbeat", "dup", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"processes": null`) {
		t.Errorf("jobs heartbeat --json: exit %d, %s", r.code, r.stdout)
	}
	if r := sandboxd(t, env, "run", "--id", "dup", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("an id in use: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := sandboxd(t, env, "run", "--ttl", "0s", "--", "true"); r.code != 125 {
		t.Errorf("--ttl 0s: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := sandboxd(t, env, "jobs", "end", "dup"); r.code != 0 || !strings.Contains(r.stdout, "killed") {
		t.Errorf("jobs end dup: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, env, "jobs", "heartbeat", "dup"); r.code != 78 {
		t.Errorf("heartbeat of an ended job: exit %d, want 78 (not_found)", r.code)
	}
}

// jobsSiteConfig is the config body of the jobs tests: site "s" on a 16 MiB tmpfs of its
// own (never this machine's disk) and job cgroups under the test's cgroup root, with a
// 500 ms grace; and that cgroup root.
func jobsSiteConfig(t *testing.T) (cfg, cgroupRoot string) {
	t.Helper()
	root := testenv.CgroupRoot(t)
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	if err := os.Mkdir(filepath.Join(mnt, "site"), 0o755); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("[[site]]\nname = \"s\"\npath = %q\n[[filesystem]]\npath = %q\nreclaim_below = \"1MiB\"\nreplace_below = \"512KiB\"\nreserve = \"0\"\n[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\n",
		filepath.Join(mnt, "site"), mnt, root), root
}
