package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestJobMountRestoredWhileRegistryHeld: a daemon starts while another sandboxd still
// holds the job registry (a handover past its wait, two daemons given one registry_dir),
// so it restores its registered mounts before it can read the registry. One mount is tied
// to uid 65534's job "old", saved by the version before per-owner ids (its job key "old";
// the registry, also that version's, holds the job under "old", in <root>/jobs/old): the
// registry re-keys the job to "old@65534" once loaded. The mount must follow it: kept at
// the start-up check (it was released then as "another job of that id runs"), still
// mounted, and released when that job ends, naming it. So too when the registry is free
// at the start (the mount is tied at once).
func TestJobMountRestoredWhileRegistryHeld(t *testing.T) {
	t.Run("held", func(t *testing.T) { restoreJobMount(t, true) })
	t.Run("free", func(t *testing.T) { restoreJobMount(t, false) })
}

func restoreJobMount(t *testing.T, held bool) {
	root := testenv.CgroupRoot(t)
	dir := writersTempDir(t, "sandboxd-held-")
	registry := filepath.Join(dir, "registry")
	if err := os.MkdirAll(registry, 0o755); err != nil {
		t.Fatal(err)
	}

	// 65534's job of the previous version: its process in <root>/jobs/old.
	proc := nobodySleeper(t, attacker)
	cg := filepath.Join(root, "jobs", "old")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(proc.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	boot := ts.Nano()
	journal := fmt.Sprintf(`{"op":"boot","boot_id":%q,"v":1}
{"op":"put","job":{"id":"old","pid":%d,"cgroup":%q,"state":"running","started_at":%q,"start_boot":%d,"lease_boot":%d,"deadline_boot":%d,"ttl":600000000000,"grace":500000000,"heartbeats":0,"owner":{"uid":%d}}}
`, strings.TrimSpace(string(bootID)), proc.Process.Pid, cg, time.Now().UTC().Format(time.RFC3339Nano),
		boot, boot+int64(10*time.Minute), boot+int64(time.Hour), attacker)
	if err := os.WriteFile(filepath.Join(registry, "jobs.journal"), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}

	// Root's mount tied to that job, saved by that version (job key "old").
	mnt, link := mountDir(t, "held-agent"), filepath.Join(t.TempDir(), "agent-files")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	req := fastReg("sess-held", mnt)
	req.Job, req.Links = "old", []api.LinkSpec{{Path: link, Target: mnt}}
	saved := []savedMount{{Registration: req, RegisteredAt: time.Now().UTC(), RegisteredBy: &api.Registrant{}, JobKey: "old"}}
	if err := state.Open(filepath.Join(dir, "state")).Save(mountsStateDoc, saved); err != nil {
		t.Fatal(err)
	}

	// Another sandboxd holds the registry while the daemon is built, and lets go of it
	// once the daemon listens (New has run).
	lock, err := os.OpenFile(filepath.Join(registry, "jobs.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if !held {
		lock.Close()
	} else if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	}()
	body := noSites(dir) + fmt.Sprintf("[jobs]\ncgroup_root = %q\nregistry_dir = %q\ngrace = \"500ms\"\n", root, registry)
	td := startDaemonIn(t, dir, baseConfig(dir, body), probeSelf)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range td.events(t) {
				t.Logf("event %s %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Subject, e.Message)
			}
		}
	})
	if cleared := len(td.eventsWith(t, "", "JobRegistryHeld cleared")) > 0; cleared != held {
		t.Fatalf("the daemon found the registry held at its start: %v, want %v", cleared, held)
	}

	// The start-up check of job-tied mounts, once the registry is loaded: kept, or (before
	// the fix) released as if its job were gone.
	poll(t, time.Minute, "the start-up check of the job-tied mount", func() bool {
		return len(td.eventsWith(t, api.EventMountRegistry, "checked against the job registry")) > 0 ||
			len(td.eventsWith(t, api.EventMountRegistry, "released mount sess-held")) > 0
	})
	if ev := td.eventsWith(t, api.EventMountRegistry, "released mount sess-held"); len(ev) > 0 {
		t.Fatalf("the mount of a running job was released at start-up: %s", ev[0].Message)
	}
	if ev := td.eventsWith(t, api.EventMountRegistry, "checked against the job registry")[0]; !strings.Contains(ev.Message, "1 kept") {
		t.Errorf("start-up check: %q, want 1 kept", ev.Message)
	}
	if m := td.waitMountState(t, "sess-held", api.MountHealthy); !m.Registered || m.Job != "old" {
		t.Fatalf("the restored mount: %+v", m)
	}

	// The job's end releases it, naming the job by its key of now.
	if code, _, answer := td.do(t, "DELETE", "/v1/jobs/old", ""); code != 200 {
		t.Fatalf("root ends 65534's job old: %d %s", code, answer)
	}
	s := sessionMount{name: "sess-held", mnt: mnt, link: link, srv: srv}
	s.checkReleased(t, td, "job old@65534 ended (deleted)")
	poll(t, time.Minute, "the job's process to end", func() bool { return !procAlive(proc.Process.Pid) })
}
