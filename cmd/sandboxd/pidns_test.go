package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// inPidNS runs script with sh as a runner in a container would: in a pid namespace of its
// own, with /proc remounted, and with the namespace's next pid forced to collide, the
// number of a host process (what ../shared/kit/in-pidns --collide does). The script forks
// its commands (";exit" keeps sh from exec'ing the last one), so they get that number.
func inPidNS(t *testing.T, collide int, env []string, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c",
		fmt.Sprintf("echo %d > /proc/sys/kernel/ns_last_pid; %s; exit $?", collide-1, script))
	cmd.Env = append(os.Environ(), env...)
	out, err := os.CreateTemp(t.TempDir(), "runner-out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out // a file, not a pipe: Wait never waits for the namespace's orphans
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // --kill-child: the namespace's init, and everything in it, die with unshare
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("runner in its own pid namespace said: %s", b)
		}
	})
	return cmd
}

func cgroupOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return strings.TrimSpace(string(b))
}

// nsPids is the pid of a host process in each pid namespace, the host's first.
func nsPids(pid int) []string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// Issue 20 item 0 (and issue 27, spawned and migrated): `sandboxd run` from a runner in its own pid namespace, whose pid number
// is forced to be that of an unrelated host process, registers itself — the process the
// kernel names — and when its lease lapses only its job is ended; the host process with
// the colliding number is never moved nor touched. A pid number sent from that namespace
// is refused with 400 bad_request naming why.
func TestRunFromAnotherPidNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.CgroupRoot(t)
	cfg := fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"200ms\"\n", root)
	_, sock, _ := serveDaemon(t, openTempDir(t), cfg)
	env := []string{api.SocketEnv + "=" + sock}
	out := t.TempDir()

	victim := startBG(t, "sleep", "600")
	vpid := victim.Process.Pid
	vcg := cgroupOf(vpid)

	// Issue 27: run spawns CMD into the job's cgroup (clone3), so the job's process is
	// run's child; the migration path (forced here as on a kernel before 5.7) moves run
	// itself and execs CMD. Either way the runner has the host process's number in its
	// namespace, and the daemon must name the right process from the kernel's account.
	for _, mode := range []struct {
		id   string
		env  []string
		exec bool // the job's process is the runner itself (exec in place)
	}{{"nsjob", []string{client.NoSpawnEnv + "=1"}, true}, {"nsspawn", nil, false}} {
		pidFile, ppidFile := filepath.Join(out, mode.id+".pid"), filepath.Join(out, mode.id+".ppid")
		inPidNS(t, vpid, append(env, mode.env...), fmt.Sprintf(`%s run --id %s --ttl 2s -- sh -c 'echo $$ > %s; echo $PPID > %s; exec sleep 600'`, binary, mode.id, pidFile, ppidFile))
		runnerNS := readPidFile(t, ppidFile) // run's number in its namespace
		cmdNS := readPidFile(t, pidFile)
		if mode.exec {
			runnerNS = cmdNS
		}
		if runnerNS != vpid {
			t.Skipf("%s: the pid collision could not be forced (the runner got %d, the host process is %d): another process took the number", mode.id, runnerNS, vpid)
		}
		var j api.Job
		waitUntil(t, time.Minute, "the job registered", func() bool { j = jobState(t, sock, mode.id); return j.PID > 0 })
		if j.PID == vpid {
			t.Fatalf("%s: the job names the host process %d, the runner's number in its own namespace", mode.id, vpid)
		}
		if ns := nsPids(j.PID); len(ns) != 2 || ns[1] != strconv.Itoa(cmdNS) {
			t.Errorf("%s: the job's process %d has pids %v across namespaces, want [%d %d] (CMD itself)", mode.id, j.PID, ns, j.PID, cmdNS)
		}
		if got := cgroupOf(vpid); got != vcg {
			t.Errorf("%s: the host process %d was moved: cgroup %q, was %q", mode.id, vpid, got, vcg)
		}
		cmdPid := j.PID
		waitUntil(t, 60*time.Second, "the lapsed job to end", func() bool { return jobState(t, sock, mode.id).State == api.JobKilled })
		if alivePid(cmdPid) {
			t.Errorf("%s: the runner's command %d outlived its job", mode.id, cmdPid)
		}
		if !alivePid(vpid) || cgroupOf(vpid) != vcg {
			t.Errorf("%s: the host process %d was touched: alive %v, cgroup %q (was %q)", mode.id, vpid, alivePid(vpid), cgroupOf(vpid), vcg)
		}
	}

	// A pid number from inside the namespace is refused, named, and registers nothing;
	// the host process with that number stays where it was.
	reply := filepath.Join(out, "reply")
	inPidNS(t, vpid, env, fmt.Sprintf(`sleep 600 & curl -s --unix-socket %s -o %s -w '%%{http_code}' -d "{\"id\":\"nsbody\",\"pid\":$!}" http://sandboxd/v1/jobs > %s.code`, sock, reply, reply))
	var body string
	waitUntil(t, time.Minute, "the answer to a pid from another namespace", func() bool {
		b, _ := os.ReadFile(reply + ".code")
		body = string(b)
		return len(body) == 3
	})
	answer, _ := os.ReadFile(reply)
	if body != "400" || !strings.Contains(string(answer), "bad_request") || !strings.Contains(string(answer), "pid namespace") {
		t.Errorf("a pid from another namespace: %s %s, want 400 bad_request naming the pid namespace", body, answer)
	}
	if j := jobState(t, sock, "nsbody"); j.ID != "" {
		t.Errorf("a refused registration was registered: %+v", j)
	}
	if !alivePid(vpid) || cgroupOf(vpid) != vcg {
		t.Errorf("the host process %d was touched by the refused registration", vpid)
	}
}
