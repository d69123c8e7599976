package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// nobodySleeper is a `sleep` running as uid (a process that uid may register).
func nobodySleeper(t *testing.T, uid uint32) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// writersTempDir is a temp directory the attacker uids may search (0755), removed at the
// end of the test: the parent of the paths the adversarial tests hand the daemon.
func writersTempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// setWriters lists uids as the daemon's writers, as [server] writers would.
func (td *testDaemon) setWriters(uids ...uint32) {
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{UIDs: uids}
	td.d.cfgMu.Unlock()
}

// jobsDaemon is a daemon watching a writers' temp dir, no sites, its jobs under a test
// cgroup root (root) with a 500 ms grace (extra: more TOML after [jobs]), the uids its
// writers.
func jobsDaemon(t *testing.T, prefix, extra string, writers ...uint32) (td *testDaemon, dir, root string) {
	t.Helper()
	root = testenv.CgroupRoot(t)
	dir = writersTempDir(t, prefix)
	td = startDaemon(t, noSites(dir)+fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\n", root)+extra)
	td.setWriters(writers...)
	return td, dir, root
}

// TestJobsAndMountsHaveOwners (issue 21 item 3): uid 65534, a writer, cannot end root's
// job, shorten its lease, nor tie a mount to it; uid 65533, also a writer, cannot end
// 65534's job (which would release 65534's job-tied mount); 65534 manages its own job and
// the kill event names who asked; a job's own process cannot heartbeat it; a configured
// mount takes pushes from root and its push_uids only.
func TestJobsAndMountsHaveOwners(t *testing.T) {
	root := testenv.CgroupRoot(t)
	dir := writersTempDir(t, "sandboxd-owners-")
	cfgMount := filepath.Join(dir, "cfgm")
	os.Mkdir(cfgMount, 0o755)
	body := noSites(dir) + fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\n", root) +
		fmt.Sprintf("[[mount]]\nname = \"cfgm\"\npath = %q\nrequired = false\npush_uids = [%d]\n", cfgMount, attacker-1)
	td := startDaemon(t, body)
	td.setWriters(attacker, attacker-1)

	// Root's job, with a 10-minute lease.
	victim := jobSleeper(t)
	ttl := api.Duration(10 * time.Minute)
	if _, err := td.client.RegisterJob(t.Context(), api.JobRequest{ID: "rootjob", PID: victim.Process.Pid, TTL: &ttl}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/v1/jobs/rootjob", ""},
		{"POST", "/v1/jobs/rootjob/heartbeat", `{"extend": "1s"}`},
	} {
		if code, answer := requestAs(t, td, attacker, attacker, nil, c.method, c.path, c.body); code != 403 || !strings.Contains(answer, "belongs to uid 0") {
			t.Errorf("%s %s as uid %d: %d %s; want 403", c.method, c.path, attacker, code, answer)
		}
	}
	j, _ := td.client.Job(t.Context(), "rootjob")
	if j.State != api.JobRunning || time.Until(j.LeaseExpiresAt) < 5*time.Minute || j.Owner == nil || j.Owner.UID != 0 {
		t.Fatalf("root's job after 65534's attempts: %+v", j)
	}

	// 65534's own job and its job-tied mount.
	own := nobodySleeper(t, attacker)
	code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "nobodyjob", "pid": %d, "ttl": "10m"}`, own.Process.Pid))
	if code != 201 || !strings.Contains(answer, `"owner":{"uid":65534,"pidns":"pid:[`) {
		t.Fatalf("65534 registers its own job: %d %s", code, answer)
	}
	mnt := filepath.Join(dir, "nobody-mnt")
	os.Mkdir(mnt, 0o755)
	os.Chown(mnt, attacker, attacker)
	reg := fmt.Sprintf(`{"name": "nobody-m", "path": %q, "job": "nobodyjob"}`, mnt)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", reg); code != 201 {
		t.Fatalf("65534 ties a mount to its own job: %d %s", code, answer)
	}
	// 65534 ties a mount to root's job: refused.
	mnt2 := filepath.Join(dir, "nobody-mnt2")
	os.Mkdir(mnt2, 0o755)
	os.Chown(mnt2, attacker, attacker)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", fmt.Sprintf(`{"name": "nobody-m2", "path": %q, "job": "rootjob"}`, mnt2)); code != 403 {
		t.Errorf("65534 ties a mount to root's job: %d %s; want 403", code, answer)
	}
	// 65533 ends 65534's job (and with it 65534's mount): refused.
	if code, answer := requestAs(t, td, attacker-1, attacker-1, nil, "DELETE", "/v1/jobs/nobodyjob", ""); code != 403 {
		t.Errorf("65533 ends 65534's job: %d %s; want 403", code, answer)
	}
	if _, ok := td.d.current().mounts.Get("nobody-m"); !ok {
		t.Fatal("65534's job-tied mount was released by another uid")
	}

	// A job's own process cannot heartbeat it, even as root.
	jobCgroup := filepath.Join(root, "jobs", "rootjob")
	if code, answer := requestAsIn(t, td, 0, 0, nil, jobCgroup, "POST", "/v1/jobs/rootjob/heartbeat", "{}"); code != 403 || !strings.Contains(answer, "inside the job's own cgroup") {
		t.Errorf("heartbeat from inside the job: %d %s; want 403", code, answer)
	}

	// 65534 ends its own job; the kill event names who asked; its mount is released.
	if code, answer := requestAs(t, td, attacker, attacker, nil, "DELETE", "/v1/jobs/nobodyjob", ""); code != 200 {
		t.Fatalf("65534 ends its own job: %d %s", code, answer)
	}
	if ev := td.eventsWith(t, api.EventKill, "asked by uid 65534"); len(ev) != 1 {
		t.Errorf("%d kill events name uid 65534 as who asked, want 1", len(ev))
	}
	poll(t, time.Minute, "65534's job-tied mount to be released", func() bool {
		_, ok := td.d.current().mounts.Get("nobody-m")
		return !ok
	})

	// A configured mount: 65534 may not push; 65533 (push_uids) and root may.
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	push := fmt.Sprintf(`{"expires_at": %q}`, exp)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "PUT", "/v1/mounts/cfgm/credentials", push); code != 403 || !strings.Contains(answer, "push_uids") {
		t.Errorf("65534 pushes onto a configured mount: %d %s; want 403", code, answer)
	}
	if code, answer := requestAs(t, td, attacker-1, attacker-1, nil, "PUT", "/v1/mounts/cfgm/credentials", push); code != 200 {
		t.Errorf("65533 (push_uids) pushes onto the configured mount: %d %s; want 200", code, answer)
	}
	var m api.Mount
	_, _, b := td.do(t, "GET", "/v1/mounts/cfgm", "")
	json.Unmarshal([]byte(b), &m)
	if m.CredentialExpiresAt == nil {
		t.Errorf("the push of a push_uid did not take: %s", b)
	}
}
