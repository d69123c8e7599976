package jobs

import (
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
)

// A registry written before ids were each owner's own (issue 21) still loads: a job of
// uid 65534 saved under its plain id, in <root>/jobs/<id>, is not quarantined, keeps its
// cgroup, and is its owner's — found, heartbeat and held against a second registration
// of that id by 65534 — while root reads it by its id too.
func TestRegistryBeforeKeysLoads(t *testing.T) {
	f := newFixture(t, nil)
	job := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "old", PID: job.Process.Pid, TTL: dur(time.Minute)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(f.opts.RegistryDir, journalName)
	doc, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	f.shutdown()
	// The last version's record of a job of 65534: its owner, its plain id and cgroup.
	edited := strings.ReplaceAll(string(doc), `"owner":{"uid":0`, `"owner":{"uid":65534`)
	if edited == string(doc) || !strings.Contains(edited, `"id":"old"`) {
		t.Fatalf("the journal does not read as expected:\n%s", doc)
	}
	os.WriteFile(journal, []byte(edited), 0o600)
	f.start()

	nobody := Caller{UID: 65534}
	j, err := f.m.GetAs("old", nobody)
	if err != nil || j.Owner == nil || j.Owner.UID != 65534 || j.Cgroup != filepath.Join(f.root, "jobs", "old") || j.State != api.JobRunning {
		t.Fatalf("65534's job of the older registry: %+v, %v", j, err)
	}
	if _, err := f.m.HeartbeatAs("old", 0, nobody); err != nil {
		t.Errorf("65534 heartbeats its job of the older registry: %v", err)
	}
	other := exec.Command("sleep", "600")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	if _, err := f.m.Register(api.JobRequest{ID: "old", PID: other.Process.Pid}, nobody); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("65534 registers \"old\" again while its job of the older registry runs: %v; want 409", err)
	}
	if r, ok := f.m.Get("old"); !ok || r.Owner.UID != 65534 {
		t.Errorf("root reads it by its id: %+v %v", r, ok)
	}
	if _, err := f.m.HeartbeatAs("old", 0, Caller{UID: 65533}); err == nil {
		t.Error("uid 65533 heartbeat 65534's job of the older registry")
	}
}

// TestPreviousVersionsJobDoesNotHoldRootsID: a registry written by the version before
// per-owner ids (hand-written here: a journal holding uid 65534's job "old" under its
// plain id, in <root>/jobs/old, on its plain shared lease "sess") held the id against
// root: root's `run --id old` was refused 409 until that job ended. At load it is
// re-keyed to its owner's namespace with its cgroup where it is: root registers "old"
// (in <root>/jobs/old@0, the old job's cgroup untouched) and the old job is still listed,
// its owner's, heartbeat on its lease and ended by its owner, root's left running; both
// load again after a restart, no leak is reported, and 65534 still cannot register a
// second "old" while its own runs.
func TestPreviousVersionsJobDoesNotHoldRootsID(t *testing.T) {
	f := newFixture(t, nil)
	// The old job's process in <root>/jobs/old, as the previous version put it.
	f.shutdown()
	oldProc := exec.Command("sleep", "600")
	oldProc.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := oldProc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oldProc.Process.Kill(); oldProc.Wait() })
	oldCg := filepath.Join(f.root, "jobs", "old")
	if err := os.MkdirAll(oldCg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(oldCg, "cgroup.procs"), []byte(strconv.Itoa(oldProc.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	boot := boottime()
	journal := fmt.Sprintf(`{"op":"boot","boot_id":%q,"v":1}
{"op":"lease","lease":{"name":"sess","ttl":600000000000,"lease_boot":%d,"heartbeats":0}}
{"op":"put","job":{"id":"old","lease":"sess","pid":%d,"cgroup":%q,"state":"running","started_at":%q,"start_boot":%d,"lease_boot":%d,"deadline_boot":%d,"ttl":600000000000,"grace":2000000000,"heartbeats":0,"owner":{"uid":65534}}}
`, bootID("/proc"), boot+int64(10*time.Minute), oldProc.Process.Pid, oldCg, time.Now().UTC().Format(time.RFC3339Nano),
		boot, boot+int64(10*time.Minute), boot+int64(time.Hour))
	if err := os.WriteFile(filepath.Join(f.opts.RegistryDir, journalName), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start()

	nobody := Caller{UID: 65534}
	j, err := f.m.GetAs("old", nobody)
	if err != nil || j.Owner == nil || j.Owner.UID != 65534 || j.Cgroup != oldCg || j.State != api.JobRunning || j.ID != "old" {
		t.Fatalf("65534's job of the previous version: %+v, %v", j, err)
	}
	// A mount the daemon saved tied to the old key follows the job (daemon restoreMounts),
	// and its commands start in the job's cgroup as it is on disk.
	if rk := f.m.Rekeyed(); len(rk) != 1 || rk["old"] != "old@65534" {
		t.Errorf("Rekeyed() = %v, want old -> old@65534", rk)
	}
	if cg := f.m.CgroupOf("old@65534"); cg != oldCg {
		t.Errorf("CgroupOf(old@65534) = %s, want %s", cg, oldCg)
	}
	// Root's own "old": registered, in a cgroup of its own.
	rootProc := spawn(t, `exec sleep 600`)
	r, err := f.m.Register(api.JobRequest{ID: "old", PID: rootProc.Process.Pid, Lease: "sess"}, Caller{})
	if err != nil {
		t.Fatalf("root registers \"old\" while 65534's job of the previous version runs: %v", err)
	}
	if r.Cgroup != oldCg+"@0" || r.Owner == nil || r.Owner.UID != 0 {
		t.Errorf("root's job old: cgroup %s owner %+v, want %s@0, root", r.Cgroup, r.Owner, oldCg)
	}
	if got := procsIn(t, oldCg); len(got) != 1 || got[0] != oldProc.Process.Pid {
		t.Errorf("the old job's cgroup holds %v, want only its process %d", got, oldProc.Process.Pid)
	}
	if n := len(f.m.List()); n != 2 {
		t.Errorf("%d jobs listed, want both \"old\"", n)
	}
	// The old job's lease is still its owner's: 65534 heartbeats it; root's "sess" is root's.
	if l, err := f.m.HeartbeatLease("sess", 0, nobody); err != nil || len(l.Jobs) != 1 {
		t.Errorf("65534 heartbeats its lease of the previous version: %+v %v", l, err)
	}
	if _, err := f.m.HeartbeatAs("old", 0, nobody); err != nil {
		t.Errorf("65534 heartbeats its job: %v", err)
	}
	other := exec.Command("sleep", "600")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	if _, err := f.m.Register(api.JobRequest{ID: "old", PID: other.Process.Pid}, nobody); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("65534 registers \"old\" again while its job of the previous version runs: %v; want 409", err)
	}
	if leaks, err := f.m.Leaks(t.Context(), false); err != nil || len(leaks.Leaks) != 0 {
		t.Errorf("leak check: %+v %v, want none", leaks.Leaks, err)
	}

	// Both load again after a restart.
	f.shutdown()
	f.start()
	if j, err := f.m.GetAs("old", nobody); err != nil || j.Cgroup != oldCg || j.State != api.JobRunning {
		t.Fatalf("65534's old job after a restart: %+v %v", j, err)
	}
	if j, err := f.m.GetAs("old", Caller{}); err != nil || j.Cgroup != oldCg+"@0" || j.State != api.JobRunning {
		t.Fatalf("root's old job after a restart: %+v %v", j, err)
	}
	// Its owner ends the old job: root's stays.
	if _, err := f.m.EndAs(t.Context(), "old", "deleted", true, nobody); err != nil {
		t.Fatalf("65534 ends its job of the previous version: %v", err)
	}
	if j, _ := f.m.GetAs("old", nobody); j.State == api.JobRunning {
		t.Errorf("65534's old job after its end: %s", j.State)
	}
	if j, err := f.m.GetAs("old", Caller{}); err != nil || j.State != api.JobRunning || !alive(rootProc.Process.Pid) {
		t.Errorf("root's job old after 65534's ended: %+v %v (alive %v)", j, err, alive(rootProc.Process.Pid))
	}
	if _, err := os.Stat(oldCg); !os.IsNotExist(err) {
		t.Errorf("the old job's cgroup after its end: %v", err)
	}
}

// procsIn lists the pids in cgroup dir.
func procsIn(t *testing.T, dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}
