package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestJobMountCommandsEndWithTheJob (issue 21 case 9, escapes from a lease): the
// refresh_command of uid 65534's mount tied to its job leaves a `setsid sleep` running;
// it starts in the job's cgroup, so the sleep is the job's and the end of the job ends it
// (it used to run on outside any job, and the leak check said "no leaks").
func TestJobMountCommandsEndWithTheJob(t *testing.T) {
	td, dir, root := jobsDaemon(t, "sandboxd-jobcmds-", "", attacker)

	p := nobodySleeper(t, attacker)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "sess", "pid": %d, "ttl": "10m"}`, p.Process.Pid)); code != 201 {
		t.Fatalf("65534 registers its job: %d %s", code, answer)
	}
	own := func(name string) string {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o755)
		os.Chown(d, attacker, attacker)
		return d
	}
	out := own("out")
	pidFile := filepath.Join(out, "pid")
	soon := time.Now().Add(time.Second)
	req := fastReg("sess-m", own("mnt"))
	req.Job, req.Unmount, req.CredentialExpiresAt = "sess", new(bool), &soon
	req.RefreshCommand = []string{"/bin/sh", "-c", fmt.Sprintf(`setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $! > %s; echo '{"Expiration": "2099-01-01T00:00:00Z"}'`, pidFile)}
	b, _ := jsonString(req)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", b); code != 201 {
		t.Fatalf("65534 ties a mount to its job: %d %s", code, answer)
	}
	var pid int
	poll(t, time.Minute, "the refresh_command's setsid sleep", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	procs, _ := os.ReadFile(filepath.Join(root, "jobs", "sess@65534", "cgroup.procs"))
	if !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(pid)+"\n") {
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		t.Fatalf("the refresh_command's setsid sleep (pid %d) is not in its job's cgroup but in %s", pid, cg)
	}
	if code, answer := requestAs(t, td, attacker, attacker, nil, "DELETE", "/v1/jobs/sess", ""); code != 200 || !strings.Contains(answer, `"state":"killed"`) {
		t.Fatalf("65534 ends its job: %d %s", code, answer)
	}
	if procAlive(pid) {
		t.Errorf("the refresh_command's setsid sleep (pid %d) outlived the job", pid)
	}
	if ev := td.eventsWith(t, api.EventCredential, "refreshed"); len(ev) == 0 {
		t.Errorf("no refresh event")
	}
}
