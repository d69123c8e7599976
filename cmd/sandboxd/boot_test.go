package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// bootBox is a 64 MiB tmpfs standing for a sandbox's disk, the state dir on it (so the
// reserve is <state_dir>/reserve, as in a VM whose state lives on its overlay disk), and
// the config serveDaemonIn would write for it.
func bootBox(t *testing.T, reserve string) (mnt, cfgPath, fsBody string) {
	mnt = testenv.Tmpfs(t, 64<<20, 0)
	fsBody = fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "12MiB"
replace_below = "4MiB"
reserve = %q
size_setting = "[openshell.drivers.vm] overlay_disk_mib"
`, mnt, reserve)
	full := fsBody + fmt.Sprintf("\n[server]\n\nsocket = %q\nstate_dir = %q\n[health]\nsample_interval = \"100ms\"\n[reclaim]\nauto_caches = []\n",
		filepath.Join(mnt, "s.sock"), filepath.Join(mnt, "state"))
	cfgPath = filepath.Join(t.TempDir(), "sandboxd.toml")
	if err := os.WriteFile(cfgPath, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	return mnt, cfgPath, fsBody
}

// armReserve writes a fully allocated reserve file as the daemon does.
func armReserve(t *testing.T, path string, n int64) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o700)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		t.Fatal(err)
	}
}

func fillUp(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("sh", "-c", `exec yes AAAA > "$1"`, "sh", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("fill %s: want ENOSPC, got %v: %s", path, err, out)
	}
}

// TestBootReleasesTheReserveOfAFullDisk is `sandboxd boot` as guest init runs it on a disk
// stopped at 100% (CONTRACT §13): exit 11 and one line naming the cause and the size
// setting; the reserve is gone, so init's write succeeds; a second boot still says
// recovery mode (the room is the released reserve); the daemon then raises BootedFull,
// which `check` and /v1/health show, until the work is removed and space is back.
func TestBootReleasesTheReserveOfAFullDisk(t *testing.T) {
	mnt, cfgPath, fsBody := bootBox(t, "8MiB")
	reserve := filepath.Join(mnt, "state", "reserve")
	armReserve(t, reserve, 8<<20)
	fillUp(t, filepath.Join(mnt, "work"))
	if err := os.WriteFile(filepath.Join(mnt, "passwd"), []byte("x"), 0o644); err == nil {
		t.Fatal("the disk is not full: init's write succeeded before the boot check")
	}

	r := sandboxd(t, nil, "boot", "--config", cfgPath)
	want := fmt.Sprintf("sandboxd boot: %s full: 0 B free of 64.0 MiB (sized by [openshell.drivers.vm] overlay_disk_mib); released the 8.0 MiB reserve; booting in recovery mode: download or remove files\n", mnt)
	if r.code != 11 || r.stdout != want {
		t.Fatalf("boot on a full disk: exit %d, stdout %q, stderr %q; want 11 and %q", r.code, r.stdout, r.stderr, want)
	}
	if _, err := os.Lstat(reserve); !os.IsNotExist(err) {
		t.Fatalf("the reserve is still there after boot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatalf("init's write after the boot check: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "state", "booted-full.json")); err != nil {
		t.Fatalf("no marker in the state dir: %v", err)
	}
	r = sandboxd(t, nil, "boot", "--config", cfgPath, "--json")
	var rep struct {
		Exit  int      `json:"exit"`
		Lines []string `json:"lines"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 11 || rep.Exit != 11 ||
		len(rep.Lines) != 1 || !strings.Contains(rep.Lines[0], "released before and is not re-armed") {
		t.Fatalf("second boot: exit %d, %s (%v); want 11, still recovery mode", r.code, r.stdout, err)
	}

	_, sock, _ := serveDaemonIn(t, mnt, fsBody, "", nil)
	c := &client.Client{SocketPath: sock}
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var booted api.Condition
	for _, cd := range st.Conditions {
		if cd.Type == api.CondBootedFull {
			booted = cd
		}
	}
	if !booted.Status || !strings.Contains(booted.Message, "overlay_disk_mib") || !strings.Contains(booted.Message, "full: 0 B free") {
		t.Fatalf("status after a full boot: BootedFull %+v", booted)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != api.HealthCritical || !strings.Contains(h.Summary, "BootedFull") {
		t.Fatalf("health after a full boot: %+v, %v", h, err)
	}
	chk := sandboxd(t, nil, "check", "--socket", sock)
	if chk.code != 2 || !strings.Contains(chk.stdout, "BootedFull") || !strings.Contains(chk.stdout, "overlay_disk_mib") {
		t.Fatalf("check after a full boot: exit %d: %s", chk.code, chk.stdout)
	}
	// The user's download: the work is read, then removed.
	f, err := os.Open(filepath.Join(mnt, "work"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := f.Read(buf); err != nil || string(buf) != "AAAA\n" {
		t.Fatalf("read the work: %q, %v", buf, err)
	}
	f.Close()
	if err := os.Remove(filepath.Join(mnt, "work")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "BootedFull to clear and the reserve to re-arm", func() bool {
		st, err := c.Status(ctx)
		if err != nil {
			return false
		}
		for _, cd := range st.Conditions {
			if cd.Type == api.CondBootedFull && cd.Status {
				return false
			}
		}
		var stt unix.Stat_t
		return unix.Stat(reserve, &stt) == nil && stt.Blocks*512 >= 8<<20
	})
}

// TestBootExitCodes: 12 for a full disk with no reserve to release, saying what to do;
// 0 with room.
func TestBootExitCodes(t *testing.T) {
	mnt, cfgPath, _ := bootBox(t, "0")
	r := sandboxd(t, nil, "boot", "--config", cfgPath)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("boot with room: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	fillUp(t, filepath.Join(mnt, "work"))
	r = sandboxd(t, nil, "boot", "--config", cfgPath)
	if r.code != 12 || !strings.Contains(r.stdout, "no reserve is configured") || !strings.Contains(r.stdout, "grow the disk ([openshell.drivers.vm] overlay_disk_mib)") ||
		!strings.Contains(r.stdout, "sandboxd image recover IMAGE") {
		t.Fatalf("boot full without a reserve: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(mnt, "state")); !os.IsNotExist(err) {
		t.Fatalf("boot wrote to a full disk it could not free: %v", err)
	}
}
