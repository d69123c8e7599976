package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestJobIDsAreEachOwnersOwn (issue 21 item 3, the squatting case): uid 65534, a writer,
// registers the id "build-1" and the lease "ci" first; root and uid 65533 can still
// register "build-1" (they got 409, and `sandboxd run --id build-1` exited 65), each in a
// cgroup of its own, and each sees, heartbeats and ends only its own: 65534's heartbeat
// of its lease "ci" does not shorten root's lease "ci", the end of 65534's "build-1"
// neither ends root's nor releases 65533's mount tied to 65533's "build-1". Root names
// another uid's job with ?owner=.
func TestJobIDsAreEachOwnersOwn(t *testing.T) {
	td, dir, root := jobsDaemon(t, "sandboxd-ids-", "", attacker, attacker-1)
	other := uint32(attacker - 1)

	// 65534 squats "build-1" and the lease "ci" before anyone else.
	squat := nobodySleeper(t, attacker)
	code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "build-1", "pid": %d, "ttl": "10m", "lease": "ci"}`, squat.Process.Pid))
	if code != 201 {
		t.Fatalf("65534 registers build-1: %d %s", code, answer)
	}
	var j api.Job
	json.Unmarshal([]byte(answer), &j)
	if j.ID != "build-1" || j.Lease != "ci" || j.Cgroup != filepath.Join(root, "jobs", "build-1@65534") {
		t.Fatalf("65534's job as answered: id %q lease %q cgroup %q; want build-1, ci, %s", j.ID, j.Lease, j.Cgroup, filepath.Join(root, "jobs", "build-1@65534"))
	}

	// Root registers "build-1" under the lease "ci" too: its own, not a 409, not 65534's lease.
	rootProc := jobSleeper(t)
	ttl := api.Duration(10 * time.Minute)
	rj, err := td.client.RegisterJob(t.Context(), api.JobRequest{ID: "build-1", PID: rootProc.Process.Pid, TTL: &ttl, Lease: "ci"})
	if err != nil {
		t.Fatalf("root registers build-1 after 65534 did: %v", err)
	}
	if rj.Cgroup != filepath.Join(root, "jobs", "build-1") || rj.Owner == nil || rj.Owner.UID != 0 {
		t.Fatalf("root's build-1: %+v", rj)
	}
	// 65533 too, with a mount tied to its job.
	otherProc := nobodySleeper(t, other)
	if code, answer := requestAs(t, td, other, other, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "build-1", "pid": %d, "ttl": "10m"}`, otherProc.Process.Pid)); code != 201 {
		t.Fatalf("65533 registers build-1: %d %s", code, answer)
	}
	mnt := filepath.Join(dir, "other-mnt")
	os.Mkdir(mnt, 0o755)
	os.Chown(mnt, int(other), int(other))
	if code, answer := requestAs(t, td, other, other, nil, "POST", "/v1/mounts", fmt.Sprintf(`{"name": "other-m", "path": %q, "job": "build-1"}`, mnt)); code != 201 {
		t.Fatalf("65533 ties a mount to its build-1: %d %s", code, answer)
	}
	// Registering the same id twice is still a conflict within one owner.
	again := nobodySleeper(t, attacker)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "build-1", "pid": %d}`, again.Process.Pid)); code != 409 {
		t.Errorf("65534 registers build-1 a second time: %d %s; want 409", code, answer)
	}

	// Each sees its own.
	for _, c := range []struct {
		uid uint32
		pid int
	}{{attacker, squat.Process.Pid}, {other, otherProc.Process.Pid}, {0, rootProc.Process.Pid}} {
		code, answer := requestAs(t, td, c.uid, c.uid, nil, "GET", "/v1/jobs/build-1", "")
		var got api.Job
		json.Unmarshal([]byte(answer), &got)
		if code != 200 || got.PID != c.pid || got.Owner == nil || got.Owner.UID != c.uid {
			t.Errorf("GET /v1/jobs/build-1 as uid %d: %d %s; want its own job (pid %d)", c.uid, code, answer, c.pid)
		}
	}
	// Root reads another's with ?owner=, and lists by owner.
	if code, answer := requestAs(t, td, 0, 0, nil, "GET", fmt.Sprintf("/v1/jobs/build-1?owner=%d", other), ""); code != 200 || !strings.Contains(answer, fmt.Sprintf(`"pid":%d`, otherProc.Process.Pid)) {
		t.Errorf("root reads 65533's build-1: %d %s", code, answer)
	}
	var page api.JobsPage
	_, _, b := td.do(t, "GET", fmt.Sprintf("/v1/jobs?owner=%d", attacker), "")
	json.Unmarshal([]byte(b), &page)
	if len(page.Jobs) != 1 || page.Jobs[0].PID != squat.Process.Pid {
		t.Errorf("GET /v1/jobs?owner=65534: %s", b)
	}
	if code, _, b := td.do(t, "GET", "/v1/jobs?owner=me", ""); code != 400 {
		t.Errorf("?owner=me: %d %s; want 400", code, b)
	}

	// 65534 shortens its lease "ci" to 1 s: root's lease "ci" keeps its 10 minutes.
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/leases/ci/heartbeat", `{"extend": "1s"}`); code != 200 {
		t.Fatalf("65534 heartbeats its lease ci: %d %s", code, answer)
	}
	var leases api.LeasesPage
	_, _, b = td.do(t, "GET", "/v1/leases", "")
	json.Unmarshal([]byte(b), &leases)
	if len(leases.Leases) != 2 {
		t.Fatalf("leases: %s; want root's and 65534's ci", b)
	}
	got, _ := td.client.Job(t.Context(), "build-1")
	if got.Owner == nil || got.Owner.UID != 0 || time.Until(got.LeaseExpiresAt) < 5*time.Minute || got.State != api.JobRunning {
		t.Fatalf("root's build-1 after 65534's 1 s heartbeat of its own lease ci: %+v", got)
	}

	// 65534 ends "build-1": its own ends; root's and 65533's run on, 65533's mount stays.
	if code, answer := requestAs(t, td, attacker, attacker, nil, "DELETE", "/v1/jobs/build-1", ""); code != 200 || !strings.Contains(answer, `"uid":65534`) {
		t.Fatalf("65534 ends build-1: %d %s", code, answer)
	}
	poll(t, time.Minute, "65534's sleeper to be ended", func() bool { return !procAlive(squat.Process.Pid) })
	if !procAlive(rootProc.Process.Pid) || !procAlive(otherProc.Process.Pid) {
		t.Fatalf("the end of 65534's build-1 ended another's: root's alive %v, 65533's alive %v", procAlive(rootProc.Process.Pid), procAlive(otherProc.Process.Pid))
	}
	// Root's own build-1 ends at root's DELETE without ?owner=; 65533's mount is untouched.
	if _, err := td.client.EndJob(t.Context(), "build-1", true, 0); err != nil {
		t.Fatalf("root ends its build-1: %v", err)
	}
	if procAlive(rootProc.Process.Pid) || !procAlive(otherProc.Process.Pid) {
		t.Fatalf("root's DELETE of build-1: root's alive %v, 65533's alive %v", procAlive(rootProc.Process.Pid), procAlive(otherProc.Process.Pid))
	}
	if _, ok := td.d.current().mounts.Get("other-m"); !ok {
		t.Fatal("65533's mount tied to its build-1 was released by the end of another uid's build-1")
	}
	// 65534 cannot end 65533's even by naming it; root can.
	if code, answer := requestAs(t, td, attacker, attacker, nil, "DELETE", fmt.Sprintf("/v1/jobs/build-1?owner=%d", other), ""); code != 403 {
		t.Errorf("65534 ends 65533's build-1 by ?owner=: %d %s; want 403", code, answer)
	}
	if code, answer := requestAs(t, td, 0, 0, nil, "DELETE", fmt.Sprintf("/v1/jobs/build-1?owner=%d", other), ""); code != 200 {
		t.Fatalf("root ends 65533's build-1 by ?owner=: %d %s", code, answer)
	}
	poll(t, time.Minute, "65533's mount to be released with its job", func() bool {
		_, ok := td.d.current().mounts.Get("other-m")
		return !ok
	})
}
