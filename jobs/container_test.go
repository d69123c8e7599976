package jobs

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestJobsUnavailableInAContainersCgroup: a registry at the root of a cgroup namespace of
// its own (a pod's container) refuses jobs with the reason by default, rather than making
// its jobs children of the container's cgroup (issue 25); an explicit cgroup_root is taken.
// The registry runs in a real child process moved into a fresh cgroup and then into a new
// cgroup namespace rooted there (unshare --cgroup), as a container runtime does.
func TestJobsUnavailableInAContainersCgroup(t *testing.T) {
	if os.Getenv("SANDBOXD_JOBS_CGNS_HELPER") != "" {
		m := New(Options{CgroupRoot: os.Getenv("SANDBOXD_JOBS_CGNS_ROOT")})
		ok, why := m.Available()
		fmt.Printf("available=%v reason=%s\n", ok, why)
		return
	}
	testenv.RequireCommand(t, "unshare")
	cg := testenv.CgroupRoot(t)
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	run := func(root string) string {
		t.Helper()
		script := fmt.Sprintf("echo $$ > %s/cgroup.procs && exec unshare --cgroup %s -test.run '^TestJobsUnavailableInAContainersCgroup$'", cg, exe)
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "SANDBOXD_JOBS_CGNS_HELPER=1", "SANDBOXD_JOBS_CGNS_ROOT="+root)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run("")
	if !strings.Contains(out, "available=false") || !strings.Contains(out, "root of its own cgroup namespace") {
		t.Errorf("default root inside a container's cgroup namespace: %s; want jobs unavailable with the reason", out)
	}
	// An explicit root outside the container's cgroup (here: beside the helper's) is the
	// administrator's choice, and taken.
	if out := run(cg + "-jobs"); !strings.Contains(out, "available=true") {
		t.Errorf("an explicit cgroup_root: %s; want jobs available", out)
	}
	// The control: in the host's namespace, the same process is not refused for it.
	if why := inContainerCgroup("/proc"); why != "" {
		t.Errorf("the test process itself is judged in a container: %s", why)
	}
}
