package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// inPod is the prefix that starts a daemon as a pod's container runtime does: moved into
// the pod's cgroup, then into a cgroup namespace of its own rooted there (unshare
// --cgroup). Its mount namespace is the test's, so /sys/fs/cgroup/unified shows the
// node's whole hierarchy, as a hostPath of /sys/fs/cgroup does in a pod.
func inPod(pod string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec unshare --cgroup "$@"`, pod), "sh"}
}

// alive says pid runs: it exists and is not a zombie (a detached job's parent is gone,
// and whoever inherits it reaps it when it likes).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// TestJobsRootOutsideThePod: Kubernetes jobs with a cgroup root outside the pod (issue
// 25, docs/operations.md): a daemon in a pod's cgroup and cgroup namespace, configured
// with [jobs] cgroup_root on the node's own hierarchy, puts a runner's job there, not in
// the pod; when the pod is killed (cgroup.kill of its cgroup, as the runtime does on a
// rollout or a label flip) the job runs on in its cgroup, and the next pod's daemon,
// reading the same registry, lists it and ends it. By default (no cgroup_root) a daemon
// in a pod answers jobs_unavailable with the reason, never a job inside the pod.
func TestJobsRootOutsideThePod(t *testing.T) {
	testenv.RequireCommand(t, "unshare")
	node := testenv.CgroupRoot(t) // the node's hierarchy, as far as this test goes
	pod1, pod2, jobsRoot := filepath.Join(node, "kubepods", "pod1"), filepath.Join(node, "kubepods", "pod2"), filepath.Join(node, "sandboxd-jobs")
	for _, d := range []string{pod1, pod2, jobsRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	dir := openTempDir(t)
	cfg := fmt.Sprintf(`[[filesystem]]
path = %q
reserve = "0"
[[site]]
name = "jobs"
path = %q
[jobs]
cgroup_root = %q
`, mnt, filepath.Join(mnt, "site"), jobsRoot)
	os.Mkdir(filepath.Join(mnt, "site"), 0o755)
	first, sock, _ := serveDaemonIn(t, dir, cfg, "", inPod(pod1))
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", first.Process.Pid))
	if own, _ := os.Readlink("/proc/self/ns/cgroup"); ns == own || ns == "" {
		t.Fatalf("the daemon is not in a cgroup namespace of its own: %q", ns)
	}

	// The job ends on SIGTERM and says so in a file: the end must reach it within its
	// grace, not only by the SIGKILL after it.
	gotTerm := filepath.Join(dir, "got-term")
	r := sandboxd(t, nil, "run", "--socket", sock, "--site", "jobs", "--detach", "--ttl", "1h", "--grace", "1m", "--",
		"sh", "-c", fmt.Sprintf(`trap "touch %s; exit 0" TERM; while :; do sleep 0.1; done`, gotTerm))
	if r.code != 0 {
		t.Fatalf("run --detach in a pod with a cgroup root outside it: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c := &client.Client{SocketPath: sock}
	job := func() *api.Job {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		j, err := c.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		return j
	}
	j := job()
	want := filepath.Join(jobsRoot, "jobs", id)
	if j.Cgroup != want {
		t.Errorf("the job's cgroup is %s, want %s (the configured root, outside the pod)", j.Cgroup, want)
	}
	procs, _ := os.ReadFile(filepath.Join(want, "cgroup.procs"))
	if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", fmt.Sprintf(" %d ", j.PID)) {
		t.Errorf("the job's process %d is not in %s (procs: %q)", j.PID, want, procs)
	}
	if b, _ := os.ReadFile(filepath.Join(pod1, "cgroup.procs")); strings.Contains(string(b), fmt.Sprint(j.PID)) {
		t.Errorf("the job's process is in the pod's cgroup")
	}

	testenv.Eventually(t, time.Minute, "the job's process to exec its command", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", j.PID))
		return strings.TrimSpace(string(b)) == "sh"
	})
	// The pod is killed (a rollout, a label flip): the whole of its cgroup.
	os.WriteFile(filepath.Join(pod1, "cgroup.kill"), []byte("1"), 0)
	first.Wait()
	if !alive(j.PID) {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", j.PID))
		t.Fatalf("the job's process %d died with the pod: %s", j.PID, st)
	}

	// The next pod's daemon, on the same registry and state, finds the job running.
	serveDaemonIn(t, dir, cfg, "", inPod(pod2))
	if j2 := job(); j2.State != api.JobRunning || j2.PID != j.PID || j2.Cgroup != want {
		t.Errorf("after the pod's restart the job is %s pid %d in %s; want running, pid %d in %s", j2.State, j2.PID, j2.Cgroup, j.PID, want)
	}
	// No process of the job counts as escaped: each is in its job's cgroup, read through
	// the daemon's cgroup namespace ("/../../sandboxd-jobs/jobs/ID").
	if r := sandboxd(t, nil, "jobs", "leaks", "--socket", sock); r.code != 0 || strings.Contains(r.stdout, "escaped") {
		t.Errorf("sandboxd jobs leaks with the job in its cgroup outside the pod: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if ended, err := c.EndJob(ctx, id, true, time.Minute); err != nil || ended.State == api.JobRunning {
		t.Errorf("end the job through the new pod's daemon: %v %+v", err, ended)
	}
	if _, err := os.Stat(gotTerm); err != nil {
		t.Errorf("the job's process was not sent SIGTERM at its end (only the SIGKILL after the grace)")
	}
	if alive(j.PID) {
		t.Errorf("the job's process %d outlived its end", j.PID)
	}

	// The default: no cgroup_root in a pod. Jobs are unavailable, and say why.
	pod3 := filepath.Join(node, "kubepods", "pod3")
	os.MkdirAll(pod3, 0o755)
	_, sock3, _ := serveDaemonIn(t, openTempDir(t), strings.Split(cfg, "[jobs]")[0], "", inPod(pod3))
	r = sandboxd(t, nil, "run", "--socket", sock3, "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "jobs_unavailable") || !strings.Contains(r.stderr, "root of its own cgroup namespace") {
		t.Errorf("run in a pod without cgroup_root: exit %d, want 125 jobs_unavailable with the reason\n%s", r.code, r.stderr)
	}
	r = sandboxd(t, nil, "jobs", "--socket", sock3)
	t.Logf("sandboxd jobs in a pod without cgroup_root: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if !strings.Contains(r.stdout+r.stderr, "root of its own cgroup namespace") {
		t.Errorf("sandboxd jobs does not say why jobs are unavailable:\n%s%s", r.stdout, r.stderr)
	}
	if entries, _ := os.ReadDir(pod3); len(entries) > 0 {
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("the daemon made a cgroup inside its pod: %s", filepath.Join(pod3, e.Name()))
			}
		}
	}
}
