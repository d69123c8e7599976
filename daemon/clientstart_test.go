package daemon

import (
	"bufio"
	"context"
	"errors"
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
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// doubleFork leaves a grandchild in a session of its own: only the job's cgroup still
// holds it. The command's and the grandchild's pids are written to dir/cmd and dir/grand.
func doubleFork(dir string) string {
	return fmt.Sprintf(`(setsid sh -c 'echo $$ > %[1]s/grand; exec sleep 600' &); echo $$ > %[1]s/cmd; exec sleep 600`, dir)
}

func pidIn(t *testing.T, file string) int {
	t.Helper()
	var pid int
	poll(t, time.Minute, "pid file "+file, func() bool {
		b, err := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

func runs(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return err == nil && i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// startRunnerMain is the runner of TestClientStartRunnerKilled: this test binary run again
// with SANDBOXD_START_RUNNER set (TestMain). It starts the job, prints its id and pid and
// blocks until it is SIGKILLed, so its deferred End never runs.
func startRunnerMain() int {
	sock, dir := os.Getenv("SANDBOXD_START_RUNNER"), os.Getenv("SANDBOXD_START_DIR")
	c := &client.Client{SocketPath: sock}
	j, err := c.Start(context.Background(), []string{"sh", "-c", doubleFork(dir)},
		client.JobOptions{TTL: 3 * time.Second, Heartbeat: 150 * time.Millisecond, Site: "aura-bg"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer j.End(context.Background())
	fmt.Println(j.ID, j.PID)
	select {}
}

// Start's runner is SIGKILLed mid-job: no deferred End runs, its heartbeats stop, the
// lease lapses and the daemon ends the command and its double-forked grandchild.
func TestClientStartRunnerKilled(t *testing.T) {
	root := testenv.CgroupRoot(t)
	_, _, body := siteOnTmpfs(t, 16<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\nregistry_dir = %q\ngrace = \"500ms\"\n", root, t.TempDir()))
	td := startDaemon(t, body)
	dir := t.TempDir()
	runner := exec.Command(os.Args[0])
	runner.Env = append(os.Environ(), "SANDBOXD_START_RUNNER="+td.sock, "SANDBOXD_START_DIR="+dir)
	out, _ := runner.StdoutPipe()
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Process.Kill(); runner.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	var id string
	var pid int
	if _, err := fmt.Sscan(line, &id, &pid); err != nil {
		t.Fatalf("runner said %q", line)
	}
	cmd, grand := pidIn(t, dir+"/cmd"), pidIn(t, dir+"/grand")
	if pid != cmd {
		t.Errorf("registered pid %d, the command is %d", pid, cmd)
	}
	procs, _ := os.ReadFile(filepath.Join(root, "jobs", id, "cgroup.procs"))
	for _, p := range []int{cmd, grand} {
		if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(p)+" ") {
			t.Errorf("process %d is not in the job's cgroup (%q)", p, procs)
		}
	}
	ctx := context.Background()
	// Counted, not timed: 22 heartbeats at least 150 ms apart outlast the 3 s ttl.
	poll(t, 60*time.Second, "22 heartbeats", func() bool {
		j, err := td.client.Job(ctx, id)
		if err != nil || j.State != api.JobRunning {
			t.Fatalf("a heartbeating job: %+v %v", j, err)
		}
		return j.Heartbeats >= 22
	})
	runner.Process.Signal(syscall.SIGKILL)
	runner.Wait()
	poll(t, 60*time.Second, "the lease to lapse", func() bool {
		j, err := td.client.Job(ctx, id)
		return err == nil && j.State == api.JobKilled
	})
	if j, _ := td.client.Job(ctx, id); j.Reason != api.ReasonLeaseExpired {
		t.Errorf("reason %q", j.Reason)
	}
	if runs(cmd) || runs(grand) {
		t.Error("a process of the job outlived its lease")
	}
}

// End ends the job (SIGTERM ignored, so SIGKILL after grace) and returns once its cgroup
// is empty; Wait then has the command's status. A heartbeat that fails (someone else
// ended the job) reaches the callback and End's error.
func TestClientStartEnd(t *testing.T) {
	root := testenv.CgroupRoot(t)
	_, _, body := siteOnTmpfs(t, 16<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\nregistry_dir = %q\ngrace = \"500ms\"\n", root, t.TempDir()))
	td := startDaemon(t, body)
	ctx := context.Background()
	c := td.client
	dir := t.TempDir()
	j, err := c.Start(ctx, []string{"sh", "-c", "trap '' TERM; " + doubleFork(dir)}, client.JobOptions{TTL: 2 * time.Second, Heartbeat: 100 * time.Millisecond, Site: "aura-bg"})
	if err != nil {
		t.Fatal(err)
	}
	cmd, grand := pidIn(t, dir+"/cmd"), pidIn(t, dir+"/grand")
	poll(t, 60*time.Second, "22 heartbeats (2.2 s > the 2 s ttl)", func() bool {
		info, err := c.Job(ctx, j.ID)
		return err == nil && info.State == api.JobRunning && info.Heartbeats >= 22
	})
	ended, err := j.End(ctx)
	if err != nil || ended.State != api.JobKilled || ended.Reason != api.ReasonDeleted {
		t.Fatalf("End: %+v %v", ended, err)
	}
	if info, _ := c.Job(ctx, j.ID); info.Processes != 0 || runs(cmd) || runs(grand) {
		t.Errorf("after End: %d processes, command %v, grandchild %v", info.Processes, runs(cmd), runs(grand))
	}
	var ee *exec.ExitError
	if err := j.Wait(); !errors.As(err, &ee) {
		t.Errorf("Wait after End: %v", err)
	}

	// SANDBOXD_JOB_ID and the exit status.
	out := filepath.Join(dir, "out")
	j2, err := c.Start(ctx, []string{"sh", "-c", `echo "$SANDBOXD_JOB_ID" > ` + out + `; exit 3`}, client.JobOptions{ID: "go-env"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j2.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Wait: %v", err)
	}
	if _, err := j2.End(ctx); err != nil {
		t.Errorf("End of an exited job: %v", err)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != "go-env" {
		t.Errorf("SANDBOXD_JOB_ID = %q", b)
	}

	// A failed heartbeat is surfaced.
	seen := make(chan error, 4)
	j3, err := c.Start(ctx, []string{"sleep", "600"}, client.JobOptions{TTL: time.Minute, Heartbeat: 100 * time.Millisecond,
		OnHeartbeatError: func(err error) { seen <- err }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EndJob(ctx, j3.ID, true, time.Second); err != nil {
		t.Fatal(err)
	}
	var got error
	select {
	case got = <-seen:
	case <-time.After(60 * time.Second):
		t.Fatal("no failed heartbeat reported")
	}
	var he *client.HeartbeatError
	var pe *client.ProblemError
	if !errors.As(got, &he) || !errors.As(got, &pe) || pe.Code() != api.CodeNotFound {
		t.Errorf("callback got %v", got)
	}
	if _, err := j3.End(ctx); !errors.As(err, &he) || j3.Err() == nil {
		t.Errorf("End after a failed heartbeat: %v", err)
	}
}

// Start on a full filesystem: the launch check refuses with disk_full and the figures,
// and nothing is started.
func TestClientStartDiskFull(t *testing.T) {
	root := testenv.CgroupRoot(t)
	mnt, site, body := siteOnTmpfs(t, 8<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\nregistry_dir = %q\n", root, t.TempDir()))
	body = strings.Replace(body, `replace_below = "512KiB"`, `replace_below = "0"`, 1)
	td := startDaemon(t, body)
	testenv.Fill(filepath.Join(site, "fill"), 64<<20)
	ctx := context.Background()
	poll(t, time.Minute, "a sample of the full filesystem", func() bool {
		st, err := td.client.Status(ctx)
		return err == nil && len(st.Filesystems) > 0 && st.Filesystems[0].AvailBytes == 0
	})
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := td.client.Start(ctx, []string{"touch", marker}, client.JobOptions{Site: "aura-bg"})
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Code() != api.CodeDiskFull || pe.StatusCode != 507 || pe.Problem.Filesystem == nil ||
		pe.Problem.Filesystem.AvailBytes != 0 || !strings.Contains(pe.Problem.Detail, mnt) {
		t.Fatalf("Start on a full disk: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
	if l, _ := td.client.Jobs(ctx); len(l.Jobs) != 0 {
		t.Errorf("jobs after a refused start: %+v", l.Jobs)
	}
}
