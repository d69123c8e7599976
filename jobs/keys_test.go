package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
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
