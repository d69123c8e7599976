package daemon

import (
	"context"
	"encoding/json"
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

func jobSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func jobProblem(err error) api.Code {
	var pe *client.ProblemError
	if errors.As(err, &pe) {
		return pe.Problem.Code
	}
	return ""
}

// The HTTP API of CONTRACT §11 end to end, over the Unix socket, on real cgroups.
func TestJobsAPI(t *testing.T) {
	root := testenv.CgroupRoot(t)
	_, site, body := siteOnTmpfs(t, 64<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"1s\"\nmax_lifetime = \"1h\"\n", root))
	td := startDaemon(t, body)
	ctx := context.Background()
	c := td.client

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs == nil || !st.Jobs.Available || st.Jobs.Root != root || !strings.Contains(strings.Join(st.Features, ","), "jobs") {
		t.Fatalf("status before any job: jobs %+v, features %v", st.Jobs, st.Features)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("cgroup root exists before any job: %v", err)
	}

	p := jobSleeper(t)
	ttl, life := api.Duration(time.Minute), api.Duration(48*time.Hour)
	j, err := c.RegisterJob(ctx, api.JobRequest{ID: "a1b2", PID: p.Process.Pid, TTL: &ttl, MaxLifetime: &life, Site: "aura-bg"})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobRunning || j.Processes != 1 || len(j.Warnings) != 1 {
		t.Errorf("registered: %+v", j)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "jobs", "a1b2", "cgroup.procs")); strings.TrimSpace(string(b)) != strconv.Itoa(p.Process.Pid) {
		t.Errorf("cgroup.procs = %q, want the registered pid", b)
	}
	// A heartbeat's answer does not count processes: "processes" is null, never a false 0.
	if code, _, b := td.do(t, "POST", "/v1/jobs/a1b2/heartbeat", "{}"); code != 200 || !strings.Contains(b, `"processes":null`) {
		t.Errorf("heartbeat of a running job: %d %s, want processes null", code, b)
	}
	// 409 for the id again, 404 for unknown ids, 400 for a zero ttl and a bad id.
	if _, err := c.RegisterJob(ctx, api.JobRequest{ID: "a1b2", PID: jobSleeper(t).Process.Pid}); jobProblem(err) != api.CodeConflict {
		t.Errorf("id in use: %v", err)
	}
	if _, err := c.Job(ctx, "nope"); jobProblem(err) != api.CodeNotFound {
		t.Errorf("unknown job: %v", err)
	}
	for _, raw := range []string{`{"pid": 1234, "ttl": "0s"}`, `{"pid": 1234, "ttl": "-1s"}`, `{"id": "../x", "pid": 1234}`, `{"pid": "x"}`} {
		if code, _, b := td.do(t, "POST", "/v1/jobs", raw); code != 400 {
			t.Errorf("POST /v1/jobs %s: %d %s, want 400", raw, code, b)
		}
	}
	if code, _, b := td.do(t, "POST", "/v1/jobs/a1b2/heartbeat", `{"extend": "2m", "x": 1}`); code != 200 || !strings.Contains(b, `unknown field \"x\"`) {
		t.Errorf("heartbeat: %d %s", code, b)
	}

	// The site's files of the registered job are kept past max_age while it runs.
	old := time.Now().Add(-24 * time.Hour)
	for _, n := range []string{"a1b2.out", "a1b2.launch.sh"} {
		f := filepath.Join(site, n)
		os.WriteFile(f, []byte("x"), 0o644)
		os.Chtimes(f, old, old)
	}
	if _, err := c.Launch(ctx, api.LaunchRequest{Site: "aura-bg"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(site, "a1b2.out")); err != nil {
		t.Errorf("a running job's file was pruned: %v", err)
	}

	// DELETE answers once nothing of the job is left.
	ended, err := c.EndJob(ctx, "a1b2", true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ended.State != api.JobKilled || ended.Reason != api.ReasonDeleted || syscall.Kill(p.Process.Pid, 0) == nil && procAlive(p.Process.Pid) {
		t.Errorf("after DELETE: %+v, process alive %v", ended, procAlive(p.Process.Pid))
	}
	if _, err := c.Heartbeat(ctx, "a1b2", 0); jobProblem(err) != api.CodeNotFound {
		t.Errorf("heartbeat after the end: %v", err)
	}
	// Its files age normally now.
	poll(t, time.Minute, "the ended job's files to be pruned", func() bool {
		c.Launch(ctx, api.LaunchRequest{Site: "aura-bg"})
		_, err := os.Stat(filepath.Join(site, "a1b2.out"))
		return os.IsNotExist(err)
	})

	rep, err := c.Leaks(ctx, false)
	if err != nil || len(rep.Leaks) != 0 {
		t.Errorf("leaks: %+v, %v", rep, err)
	}
	code, _, metrics := td.do(t, "GET", "/metrics", "")
	for _, want := range []string{`sandboxd_jobs{state="killed"} 1`, `sandboxd_jobs_ended_total{reason="deleted"} 1`,
		`sandboxd_jobs_leaked{kind="unleased"} 0`, "sandboxd_last_activity_timestamp_seconds "} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var page api.JobsPage
	_, _, b := td.do(t, "GET", "/v1/jobs", "")
	json.Unmarshal([]byte(b), &page)
	if len(page.Jobs) != 1 || page.Jobs[0].State != api.JobKilled {
		t.Errorf("GET /v1/jobs: %s", b)
	}
}

func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// Without cgroup v2 under the configured root, job calls answer 503 jobs_unavailable with
// the reason, /v1/status says why, and features does not list "jobs".
func TestJobsUnavailable(t *testing.T) {
	testenv.RequireRoot(t)
	td := startDaemon(t, fmt.Sprintf("[jobs]\ncgroup_root = %q\n", t.TempDir()))
	code, _, b := td.do(t, "POST", "/v1/jobs", fmt.Sprintf(`{"pid": %d}`, os.Getpid()))
	if code != 503 || !strings.Contains(b, "jobs_unavailable") || !strings.Contains(b, "cgroup2") {
		t.Errorf("register without cgroup2: %d %s", code, b)
	}
	if code, _, b := td.do(t, "GET", "/v1/jobs/leaks", ""); code != 503 || !strings.Contains(b, "jobs_unavailable") {
		t.Errorf("leaks without cgroup2: %d %s", code, b)
	}
	st, err := td.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs.Available || !strings.Contains(st.Jobs.Reason, "cgroup2") || strings.Contains(strings.Join(st.Features, ","), "jobs") {
		t.Errorf("status: jobs %+v, features %v", st.Jobs, st.Features)
	}
}

// A reload (SIGHUP) changes the [jobs] limits in place: running jobs keep their cgroups
// and leases, new registrations get the new defaults; a new cgroup_root waits for a restart.
func TestJobsReloadInPlace(t *testing.T) {
	root := testenv.CgroupRoot(t)
	dir := t.TempDir()
	body := noSites(dir) + fmt.Sprintf("[jobs]\ncgroup_root = %q\ndefault_ttl = \"1h\"\n", root)
	td := startDaemon(t, body)
	ctx := context.Background()
	before, err := td.client.RegisterJob(ctx, api.JobRequest{ID: "before", PID: jobSleeper(t).Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(td.d.opts.ConfigPath)
	next := strings.Replace(string(text), `default_ttl = "1h"`, "default_ttl = \"90s\"\nkeep_ended = \"5m\"", 1)
	next = strings.Replace(next, "cgroup_root = "+strconv.Quote(root), "cgroup_root = "+strconv.Quote(root+"-other"), 1)
	os.WriteFile(td.d.opts.ConfigPath, []byte(next), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	after, err := td.client.RegisterJob(ctx, api.JobRequest{ID: "after", PID: jobSleeper(t).Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if after.TTLSeconds != 90 || after.Cgroup != filepath.Join(root, "jobs", "after") {
		t.Errorf("after the reload: ttl %vs, cgroup %s; want 90s under the running root", after.TTLSeconds, after.Cgroup)
	}
	if j, err := td.client.Job(ctx, "before"); err != nil || j.State != api.JobRunning || !j.LeaseExpiresAt.Equal(before.LeaseExpiresAt) && j.LeaseExpiresAt.Sub(before.LeaseExpiresAt).Abs() > time.Second {
		t.Errorf("the running job changed with the reload: %+v (was %+v), %v", j, before, err)
	}
	evs, _, _, _ := td.d.events.Since(0)
	found := false
	for _, e := range evs {
		if e.Kind == api.EventConfig && strings.Contains(e.Message, "jobs.cgroup_root takes effect at the next restart") {
			found = true
		}
	}
	if !found {
		t.Error("no config event says the new cgroup_root waits for a restart")
	}
}
