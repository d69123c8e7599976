package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Issue 27 item 1: `sandboxd run` starts CMD straight in the job's cgroup
// (clone3(CLONE_INTO_CGROUP)): CMD is in the cgroup, run itself is not (it is CMD's
// parent, outside the job), and no process was migrated. Ended by DELETE, CMD dies of
// SIGTERM and run dies of it too, as when run exec'd CMD. The forced fallback (the test
// hook of a kernel without CLONE_INTO_CGROUP) moves run itself and execs CMD in place,
// and the job works the same. Exit statuses are CMD's either way.
func TestRunSpawnsIntoCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"5s\"\n", root)
	_, sock, logs := serveDaemon(t, openTempDir(t), cfg)
	env := []string{api.SocketEnv + "=" + sock}
	out := t.TempDir()
	// Item 2: the launch check rides in the registration's call; its refusal is run's 125
	// and registers nothing.
	if r := sandboxd(t, env, "run", "--id", "refused", "--need-bytes", "1PiB", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "refused") && !strings.Contains(r.stderr, "disk_full") {
		t.Errorf("run with a need no disk has: exit %d, %s; want 125 and the refusal", r.code, r.stderr)
	}
	if j := jobState(t, sock, "refused"); j.ID != "" {
		t.Errorf("a refused launch registered a job: %+v", j)
	}
	for _, mode := range []struct {
		name    string
		env     []string
		spawned bool
	}{{"spawn", nil, true}, {"fallback", []string{client.NoSpawnEnv + "=1"}, false}} {
		t.Run(mode.name, func(t *testing.T) {
			id := "sp-" + mode.name
			ppidFile := filepath.Join(out, id+".ppid")
			runner := startBGEnv(t, append(env, mode.env...), binary, "run", "--id", id, "--",
				"sh", "-c", "echo $PPID > "+ppidFile+"; exec sleep 600")
			var j api.Job
			waitUntil(t, time.Minute, "job "+id+" registered with its process", func() bool {
				j = jobState(t, sock, id)
				return j.PID > 0
			})
			rel := "0::" + strings.TrimPrefix(j.Cgroup, cgroupMountOf(j.Cgroup))
			if got := cgroup2Of(j.PID); got != rel {
				t.Errorf("the job's process %d is in %q, want %q", j.PID, got, rel)
			}
			if mode.spawned {
				if j.PID == runner.Process.Pid {
					t.Errorf("the job's process is run itself (%d): it was migrated, not spawned", j.PID)
				}
				if got := readPidFile(t, ppidFile); got != runner.Process.Pid {
					t.Errorf("CMD's parent is %d, want run (%d)", got, runner.Process.Pid)
				}
				if got := cgroup2Of(runner.Process.Pid); got == rel {
					t.Errorf("run itself is in the job's cgroup %q: it should stay outside, CMD's parent", got)
				}
				if strings.Contains(logs.String(), "job="+id) && strings.Contains(logs.String(), "moved into it instead") {
					t.Errorf("the daemon migrated a job that could be spawned: %s", logs.String())
				}
			} else if j.PID != runner.Process.Pid {
				t.Errorf("fallback: the job's process is %d, want run itself (%d), exec'd in place", j.PID, runner.Process.Pid)
			}
			if r := sandboxd(t, nil, "jobs", "end", "--socket", sock, id); r.code != 0 {
				t.Fatalf("jobs end %s: %d %s", id, r.code, r.stderr)
			}
			err := runner.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
				t.Errorf("run of the ended job: %v, want death by SIGTERM (CMD's)", err)
			}
			r := sandboxd(t, append(env, mode.env...), "run", "--", "sh", "-c", "exit 7")
			if r.code != 7 {
				t.Errorf("run -- sh -c 'exit 7': exit %d, want 7 (%s)", r.code, r.stderr)
			}
			// CMD's death by a signal is run's, also for one Go's runtime handles itself
			// (SIGABRT would be a goroutine dump and exit 2, SIGUSR1 caught and ignored).
			for _, sig := range []syscall.Signal{syscall.SIGABRT, syscall.SIGUSR1} {
				c := exec.Command(binary, "run", "--", "sh", "-c", fmt.Sprintf("kill -%d $$", sig))
				c.Env = append(os.Environ(), append(env, mode.env...)...)
				err := c.Run()
				if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); err == nil || !ok || !ws.Signaled() || ws.Signal() != sig {
					t.Errorf("run of a CMD killed by %v: %v, want death by the same signal", sig, err)
				}
			}
			if r := sandboxd(t, append(env, mode.env...), "run", "--", "/nonexistent/cmd"); r.code != 127 {
				t.Errorf("run of a missing command: exit %d, want 127", r.code)
			}
		})
	}
}

// cgroup2Of is pid's line of the cgroup2 hierarchy ("0::/path").
func cgroup2Of(pid int) string {
	for _, l := range strings.Split(cgroupOf(pid), "\n") {
		if strings.HasPrefix(l, "0::") {
			return l
		}
	}
	return ""
}

// cgroupMountOf is the cgroup2 mount a cgroup directory is under (/sys/fs/cgroup or
// /sys/fs/cgroup/unified here).
func cgroupMountOf(dir string) string {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		var st, up unix.Statfs_t
		if unix.Statfs(d, &st) == nil && unix.Statfs(filepath.Dir(d), &up) == nil && up.Type != st.Type {
			return d
		}
	}
	return ""
}

// spawnAttackEnv makes the test binary the attacker of TestSpawnAsNobody (TestMain).
const spawnAttackEnv = "SANDBOXD_TEST_SPAWN_ATTACK"

// spawnAttack runs as uid 65534 with a spawned job of its own: it tries to start a process
// in its own job's cgroup and in another job's (clone3), to move a process it does not own
// into its job (cgroup.procs), and to report as its job's process one it does not own and
// one of its own outside the cgroup. It prints what each attempt got, as JSON.
func spawnAttack() int {
	sock, victimCg := os.Getenv("SOCK"), os.Getenv("VICTIM_CGROUP")
	victimPid, _ := strconv.Atoi(os.Getenv("VICTIM_PID"))
	res := map[string]string{}
	say := func(k string, err error) {
		if err == nil {
			res[k] = "ok"
			return
		}
		var pe *client.ProblemError
		if errors.As(err, &pe) {
			res[k] = string(pe.Problem.Code)
			return
		}
		var en syscall.Errno
		if errors.As(err, &en) {
			res[k] = unix.ErrnoName(en)
			return
		}
		res[k] = err.Error()
	}
	defer func() { json.NewEncoder(os.Stdout).Encode(res) }()
	c := &client.Client{SocketPath: sock}
	ctx := context.Background()
	spawnInto := func(fd int) error {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}})
		if err == nil {
			waitChild(pid)
		}
		return err
	}
	sp, err := c.BeginSpawn(ctx, api.JobRequest{ID: "atk-1"})
	say("reserve", err)
	if err != nil {
		return 0
	}
	say("clone3_own", spawnInto(sp.CgroupFD))
	vfd, err := unix.Open(victimCg, unix.O_PATH|unix.O_DIRECTORY, 0)
	say("open_victim", err)
	if err == nil {
		say("clone3_victim", spawnInto(vfd))
	}
	say("move_victim", os.WriteFile(filepath.Join(sp.Job.Cgroup, "cgroup.procs"), []byte(strconv.Itoa(victimPid)), 0))
	pfd, err := unix.PidfdOpen(victimPid, 0)
	say("pidfd_victim", err)
	if err == nil {
		if err := sp.Spawned(pfd); err != nil {
			say("report_victim", err)
		} else {
			_, err := sp.Result()
			say("report_victim", err)
		}
	}
	sp.Close()

	sp, err = c.BeginSpawn(ctx, api.JobRequest{ID: "atk-2"})
	say("reserve2", err)
	if err != nil {
		return 0
	}
	defer sp.Close()
	child := exec.Command("sleep", "600")
	pidfd := -1
	child.SysProcAttr = &syscall.SysProcAttr{PidFD: &pidfd}
	if err := child.Start(); err != nil {
		say("outside_child", err)
		return 0
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if err := sp.Spawned(pidfd); err != nil {
		say("report_outside", err)
	} else {
		_, err := sp.Result()
		say("report_outside", err)
	}
	return 0
}

// Issue 27 item 1, the non-root runner: uid 65534 (a writer) gets its job's cgroup fd but
// the fd grants nothing by itself: the kernel checks clone3(CLONE_INTO_CGROUP) against the
// caller's own credentials, so it can spawn neither into its own job's cgroup (root's, as
// is the common ancestor with its own cgroup) nor into another job's; it cannot move a
// process it does not own into its job; and a pidfd it reports is taken only for its own
// child in the job's cgroup (403 otherwise, nothing registered, the other process left
// alone). `sandboxd run` as that uid still works: the kernel's EACCES sends it down the
// migration path, which the daemon does for the calling process only.
func TestSpawnAsNobody(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	base := openTempDir(t)
	bin := filepath.Join(base, "sandboxd")
	self := filepath.Join(base, "attacker")
	exe, _ := os.Executable()
	for src, dst := range map[string]string{binary: bin, exe: self} {
		if b, err := os.ReadFile(src); err != nil || os.WriteFile(dst, b, 0o755) != nil {
			t.Fatalf("copy %s where uid %d may run it: %v", src, nobody, err)
		}
	}
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"200ms\"\n", root)
	server := fmt.Sprintf("writers = [\"uid:%d\"]\nsocket_mode = \"0666\"", nobody)
	dir := filepath.Join(base, "d")
	os.Mkdir(dir, 0o755)
	_, sock, logs := serveDaemonIn(t, dir, cfg, server, nil)
	env := []string{api.SocketEnv + "=" + sock}

	// The victim: root's job, spawned.
	startBGEnv(t, env, binary, "run", "--id", "victim", "--", "sleep", "600")
	var victim api.Job
	waitUntil(t, time.Minute, "the victim job registered", func() bool { victim = jobState(t, sock, "victim"); return victim.PID > 0 })
	bystander := startBG(t, "sleep", "600")
	bcg := cgroupOf(bystander.Process.Pid)

	attack := exec.Command(self)
	attack.Env = append(os.Environ(), spawnAttackEnv+"=1", "SOCK="+sock, "VICTIM_CGROUP="+victim.Cgroup, "VICTIM_PID="+strconv.Itoa(bystander.Process.Pid))
	attack.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stderr strings.Builder
	attack.Stderr = &stderr
	b, err := attack.Output()
	if err != nil {
		t.Fatalf("the attacker: %v %s", err, stderr.String())
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("the attacker's report %q: %v", b, err)
	}
	want := map[string]string{"reserve": "ok", "clone3_own": "EACCES", "open_victim": "ok", "clone3_victim": "EACCES",
		"move_victim": "EACCES", "pidfd_victim": "ok", "report_victim": "forbidden",
		"reserve2": "ok", "report_outside": "forbidden"}
	for k, v := range want {
		if !strings.Contains(got[k], v) {
			t.Errorf("attacker %s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	for _, id := range []string{"atk-1", "atk-2"} {
		if j := jobState(t, sock, id); j.ID != "" {
			t.Errorf("a refused spawn was registered: %+v", j)
		}
	}
	if !alivePid(bystander.Process.Pid) || cgroupOf(bystander.Process.Pid) != bcg {
		t.Errorf("root's process %d was touched: alive %v, cgroup %q (was %q)", bystander.Process.Pid, alivePid(bystander.Process.Pid), cgroupOf(bystander.Process.Pid), bcg)
	}
	if j := jobState(t, sock, "victim"); j.State != api.JobRunning || j.PID != victim.PID || j.Processes != 1 {
		t.Errorf("the victim job changed: %+v (was pid %d)", j, victim.PID)
	}

	// sandboxd run as uid 65534 works, by the migration the kernel's EACCES falls back to.
	code, serr := asNobody(t, bin, "run", "--socket", sock, "--id", "nb-run", "--", "sh", "-c", "exit 5")
	if code != 5 {
		t.Errorf("run as uid %d: exit %d, want 5 (CMD's): %s", nobody, code, serr)
	}
	var j api.Job // its end is noticed from the cgroup's events, after run returned
	waitUntil(t, time.Minute, "nb-run to be seen ended", func() bool { j = jobState(t, sock, "nb-run"); return j.State != api.JobRunning })
	if j.Owner == nil || j.Owner.UID != nobody || j.State != api.JobEnded {
		t.Errorf("run as uid %d: job %+v, want owned by it and ended", nobody, j)
	}
	// The daemon's stderr reaches logs through a pipe and os/exec's copying goroutine: wait
	// for the line rather than read it once.
	waitUntil(t, time.Minute, "the fallback said in the log (moved into it instead, permission denied)", func() bool {
		return strings.Contains(logs.String(), "moved into it instead") && strings.Contains(logs.String(), "permission denied")
	})
}

// Issue 27: 100 concurrent `sandboxd run -- sleep 1` from one runner: every one is
// registered (by its id), every one ends by itself, and nothing is left: no live job, no
// job cgroup with a process, no run process.
func TestRunHundredConcurrent(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\n", root)
	_, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	env := append(os.Environ(), api.SocketEnv+"="+sock)
	const n = 100
	var wg sync.WaitGroup
	codes := make([]int, n)
	errs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(binary, "run", "--id", fmt.Sprintf("c%03d", i), "--", "sleep", "1")
			cmd.Env = env
			var eb strings.Builder
			cmd.Stderr = &eb
			err := cmd.Run()
			codes[i], errs[i] = cmd.ProcessState.ExitCode(), eb.String()
			if err != nil && codes[i] == 0 {
				codes[i] = -1
			}
		}()
	}
	wg.Wait()
	failed := 0
	for i, c := range codes {
		if c != 0 {
			failed++
			if failed < 5 {
				t.Errorf("run %d: exit %d: %s", i, c, errs[i])
			}
		}
	}
	// The daemon notices each end from its cgroup's events, after run returned: wait
	// until no job of the 100 is running any more, then count.
	registered, ended := 0, 0
	waitUntil(t, 60*time.Second, "the 100 jobs to be seen ending", func() bool {
		r := sandboxd(t, nil, "jobs", "list", "--socket", sock, "--json")
		var p api.JobsPage
		json.Unmarshal([]byte(r.stdout), &p)
		registered, ended = 0, 0
		running := 0
		for _, j := range p.Jobs {
			if strings.HasPrefix(j.ID, "c") {
				registered++
				switch {
				case j.State == api.JobEnded && j.Reason == api.ReasonExited:
					ended++
				case j.State == api.JobRunning:
					running++
				}
			}
		}
		return running == 0
	})
	left := 0
	ents, _ := os.ReadDir(filepath.Join(root, "jobs"))
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(root, "jobs", e.Name(), "cgroup.procs")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			left++
		}
	}
	if failed != 0 || registered != n || ended != n || left != 0 {
		t.Errorf("100 concurrent runs: %d failed, %d registered, %d ended by themselves, %d cgroups with processes left; want 0, %d, %d, 0", failed, registered, ended, left, n, n)
	}
}

// Issue 27 item 2: the registry's journal write is on the answer's path as one write() to
// registry_dir (a tmpfs, no fsync; jobs/journal.go), so an answered job survives a crash
// of sandboxd: SIGKILLed right after the spawn's answer, the daemon restarted finds the
// job running with its process and its lease unchanged, and still ends it.
func TestSpawnedJobSurvivesDaemonCrash(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	dir := openTempDir(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"200ms\"\n", root)
	daemon, sock, _ := serveDaemon(t, dir, cfg)
	c := &client.Client{SocketPath: sock}
	ttl := api.Duration(time.Hour)
	sp, err := c.BeginSpawn(context.Background(), api.JobRequest{ID: "crash-sp", TTL: &ttl})
	if err != nil {
		t.Fatal(err)
	}
	pidfd := -1
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.CgroupFD, PidFD: &pidfd}})
	if err != nil {
		t.Fatalf("clone3 into the job's cgroup as root: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); waitChild(pid) })
	if err := sp.Spawned(pidfd); err != nil {
		t.Fatal(err)
	}
	j, err := sp.Result()
	sp.Close()
	if err != nil {
		t.Fatal(err)
	}
	daemon.Process.Signal(syscall.SIGKILL) // right after the answer
	daemon.Wait()
	if j.PID != pid || j.State != api.JobRunning {
		t.Fatalf("the answer: %+v, want running with pid %d", j, pid)
	}
	_, sock, logs := serveDaemon(t, dir, cfg)
	got := jobState(t, sock, "crash-sp")
	if got.State != api.JobRunning || got.PID != pid || got.Processes != 1 {
		t.Fatalf("after the crash: %+v, want running with pid %d; logs:\n%s", got, pid, logs.String())
	}
	if d := got.LeaseExpiresAt.Sub(j.LeaseExpiresAt); d < -time.Second || d > time.Second {
		t.Errorf("the lease moved across the crash: %s, was %s", got.LeaseExpiresAt, j.LeaseExpiresAt)
	}
	if r := sandboxd(t, nil, "jobs", "end", "--socket", sock, "crash-sp"); r.code != 0 {
		t.Fatalf("jobs end: %d %s", r.code, r.stderr)
	}
	if alivePid(pid) {
		t.Errorf("the job's process %d outlived its end after the restart", pid)
	}
}

// Issue 27 (run − launch): sandboxd run catches the signals it forwards from before its
// spawn call, so that setting them up is off its critical path. A SIGTERM, SIGHUP or
// SIGINT that comes before CMD exists still ends run by that signal, as it did when run
// had no handler yet: the call is cut short (not waited for until its timeout), CMD never
// starts, and the connection is closed without a report, so the daemon registers nothing
// (TestSpawnClosedBeforeReport). The daemon here is the test's: it takes the call and
// never answers.
func TestRunSignalBeforeSpawn(t *testing.T) {
	dir := openTempDir(t)
	sock := filepath.Join(dir, "fake.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		marker := filepath.Join(dir, "ran-"+unix.SignalName(sig))
		cmd := exec.Command(binary, "run", "--socket", sock, "--timeout", "60s", "--", "touch", marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		conn, err := l.Accept()
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		req, err := http.ReadRequest(br)
		if err != nil || req.URL.Path != "/v1/jobs/spawn" {
			t.Errorf("the fake daemon got %v, %v; want POST /v1/jobs/spawn", req, err)
		} else {
			io.Copy(io.Discard, req.Body)
		}
		cmd.Process.Signal(sig) // run is in its call, CMD not started
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("run sent %v during its spawn call: %v, want death by %v", sig, err, sig)
		}
		rest, _ := io.ReadAll(br)
		conn.Close()
		if len(rest) > 0 {
			t.Errorf("run sent more after its request: %q, want the connection closed without a report", rest)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("CMD ran although run was ended by %v before it started it", sig)
		}
	}
}

// The daemon's side of it: a caller that got the offer (the job's cgroup fd) and closes
// the connection without a report gets nothing registered, and the job's cgroup is
// removed.
func TestSpawnClosedBeforeReport(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\n", root)
	_, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	c := &client.Client{SocketPath: sock}
	sp, err := c.BeginSpawn(context.Background(), api.JobRequest{ID: "closed-early"})
	if err != nil {
		t.Fatal(err)
	}
	cg := sp.Job.Cgroup
	if _, err := os.Stat(cg); err != nil {
		t.Errorf("the offered job's cgroup %s: %v", cg, err)
	}
	sp.Close()
	waitUntil(t, time.Minute, "the job's cgroup removed", func() bool {
		_, err := os.Stat(cg)
		return errors.Is(err, os.ErrNotExist)
	})
	if j := jobState(t, sock, "closed-early"); j.ID != "" {
		t.Errorf("a spawn closed before its report registered a job: %+v", j)
	}
}

// Issue 27: the spawn's answer does not wait for the end of a job whose process exited
// already (the daemon ends it right after the answer, or from its cgroup's events), and a
// registration of the same id does not stumble on that end: `sandboxd run --id X` of a
// short command, again and again in a row, gets the id every time, never 409.
func TestRunSameIDInARow(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\n", root)
	_, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	env := []string{api.SocketEnv + "=" + sock}
	for i := range 6 {
		argv := []string{"run", "--id", "in-a-row", "--", "true"}
		if i%2 == 1 {
			argv = []string{"run", "--id", "in-a-row", "--", "sh", "-c", "exit 0"}
		}
		if r := sandboxd(t, env, argv...); r.code != 0 {
			t.Fatalf("run %d of --id in-a-row: exit %d: %s", i, r.code, r.stderr)
		}
	}
	waitUntil(t, time.Minute, "the last in-a-row to be seen ended", func() bool {
		j := jobState(t, sock, "in-a-row")
		return j.State == api.JobEnded && j.Reason == api.ReasonExited
	})
}
