package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestWritersRequiredMountGatesItsJobsLaunches (issue 21 item 6, the job part): uid
// 65534's required mount, tied to its job and on an empty directory of its own (so
// missing), gates the launches that name that job ("job", `sandboxd launch --job`: 503
// mount_unavailable, exit 75) and never root's launch nor 65534's own launch of no job.
// A registration with its launch check in one call ("launch": {"job": ...}) is gated the
// same. A launch naming no job of that id answers 404.
func TestWritersRequiredMountGatesItsJobsLaunches(t *testing.T) {
	td, dir, _ := jobsDaemon(t, "sandboxd-launchjob-", "", attacker)

	p := nobodySleeper(t, attacker)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "sess", "pid": %d, "ttl": "10m"}`, p.Process.Pid)); code != 201 {
		t.Fatalf("65534 registers its job: %d %s", code, answer)
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	os.Chown(empty, attacker, attacker)
	reg := fmt.Sprintf(`{"name": "sess-req", "path": %q, "required": true, "job": "sess", "unmount": false, "probe_interval": "100ms"}`, empty)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", reg); code != 201 || !strings.Contains(answer, `or its job (\"job\")`) {
		t.Fatalf("65534's required job-tied mount: %d %s", code, answer)
	}
	poll(t, time.Minute, "the required mount probed missing", func() bool { return td.mount(t, "sess-req").State == api.MountMissing })

	if code, p := launchMounts(t, td); code != 200 {
		t.Errorf("root's launch failed on 65534's required mount: %d %s", code, p.Detail)
	}
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/launch", `{}`); code != 200 {
		t.Errorf("65534's launch of no job failed on its job's required mount: %d %s", code, answer)
	}
	code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/launch", `{"job": "sess"}`)
	if code != 503 || !strings.Contains(answer, `"code":"mount_unavailable"`) || !strings.Contains(answer, "sess-req") {
		t.Errorf("65534's launch for its job passed its job's missing required mount: %d %s; want 503 mount_unavailable (exit 75)", code, answer)
	}
	// The same through a registration with its launch check in one call (POST /v1/jobs
	// with "launch"): refused, and nothing registered.
	cmd1 := nobodySleeper(t, attacker)
	code, answer = requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "cmd1", "pid": %d, "launch": {"job": "sess"}}`, cmd1.Process.Pid))
	if code != 503 || !strings.Contains(answer, `"code":"mount_unavailable"`) {
		t.Errorf("65534's registration with a launch for its job: %d %s; want 503 mount_unavailable", code, answer)
	}
	if code, answer := requestAs(t, td, attacker, attacker, nil, "GET", "/v1/jobs/cmd1", ""); code != 404 {
		t.Errorf("the refused registration left a job: %d %s", code, answer)
	}
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/launch", `{"job": "nosuch"}`); code != 404 {
		t.Errorf("a launch for a job that is not registered: %d %s; want 404", code, answer)
	}
	if h := td.status(t); strings.Contains(fmt.Sprint(h.Conditions), "critical") {
		t.Errorf("65534's mount made a critical condition: %+v", h.Conditions)
	}
}
