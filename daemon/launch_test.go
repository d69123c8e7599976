package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// siteOnTmpfs is the launch tests' setup: a tmpfs with a site and a watched filesystem.
func siteOnTmpfs(t *testing.T, size int64, inodes int, extra string) (mnt, site, body string) {
	mnt = testenv.Tmpfs(t, size, inodes)
	site = filepath.Join(mnt, "aura-bg")
	if err := os.Mkdir(site, 0o755); err != nil {
		t.Fatal(err)
	}
	body = fmt.Sprintf(`
[[site]]
name = "aura-bg"
path = %q
max_age = "12h"
min_age = "15m"
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "512KiB"
reclaim_below_inodes = 20
replace_below_inodes = 5
reserve = "0"
%s`, site, mnt, extra)
	return mnt, site, body
}

// staleJobs writes n jobs of 7 files, each file of size bytes, 13 h old.
func staleJobs(t *testing.T, site string, n int, size int) {
	old := time.Now().Add(-13 * time.Hour)
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		for _, ext := range []string{"pid", "status", "out", "err", "launch.sh", "callback", "meta"} {
			p := filepath.Join(site, fmt.Sprintf("job%04d.%s", i, ext))
			if err := os.WriteFile(p, buf, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(p, old, old)
		}
	}
}

// fillToFull writes user data until the filesystem refuses (ENOSPC).
func fillToFull(t *testing.T, mnt string) {
	err := testenv.Fill(filepath.Join(mnt, "userdata"), 1<<40)
	if err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("fill: %v", err)
	}
}

func launch(t *testing.T, td *testDaemon, body string) (int, api.LaunchResponse, api.Problem) {
	status, _, raw := td.do(t, "POST", "/v1/launch", body)
	var ok api.LaunchResponse
	var p api.Problem
	if status == 200 {
		json.Unmarshal([]byte(raw), &ok)
	} else {
		json.Unmarshal([]byte(raw), &p)
	}
	return status, ok, p
}

// TestLaunchPrunesItsWayOutOfAFullDisk: at 100% the launch call still answers, prunes the
// site's stale files and succeeds because that frees what the call needs.
func TestLaunchPrunesItsWayOutOfAFullDisk(t *testing.T) {
	mnt, site, body := siteOnTmpfs(t, 16<<20, 0, "")
	staleJobs(t, site, 20, 32<<10) // 140 files, 4.4 MiB
	fillToFull(t, mnt)
	td := startDaemon(t, body)
	status, r, p := launch(t, td, `{"need_bytes":"1MiB"}`)
	if status != 200 {
		t.Fatalf("launch at 100%%: %d %s: %s", status, p.Code, p.Detail)
	}
	// The call prunes what its budget allows; the start-up self-heal and the background
	// drain (both started with the daemon) may take some or all of it first. Together
	// they remove every stale file, and the call answers ok with the space it needs.
	if r.Filesystem.AvailBytes < 1<<20 || r.Pruned != int64(len(r.PrunedJobs))*7 {
		t.Fatalf("pruned %d files of %d jobs, %d bytes free after: %+v", r.Pruned, len(r.PrunedJobs), r.Filesystem.AvailBytes, r)
	}
	poll(t, time.Minute, "every stale file to be pruned", func() bool {
		left, _ := os.ReadDir(site)
		return len(left) == 0
	})
	if _, err := os.Stat(filepath.Join(mnt, "userdata")); err != nil {
		t.Fatal("user data was touched")
	}
}

// TestLaunchRefusalIsAFingerprint: with nothing to prune, a full disk is refused with
// replace_sandbox and a detail that names free bytes, percent used, free inodes and the
// number of files in the site; an inode shortage above replace_below_inodes is
// inodes_exhausted.
func TestLaunchRefusalIsAFingerprint(t *testing.T) {
	mnt, site, body := siteOnTmpfs(t, 16<<20, 0, "")
	for i := 0; i < 3; i++ { // fresh jobs: never pruned
		os.WriteFile(filepath.Join(site, fmt.Sprintf("fresh%d.out", i)), []byte("x"), 0o644)
	}
	fillToFull(t, mnt)
	td := startDaemon(t, body)
	status, _, p := launch(t, td, `{}`)
	if status != 507 || p.Code != api.CodeReplaceSandbox {
		t.Fatalf("launch: %d %s, want 507 replace_sandbox: %s", status, p.Code, p.Detail)
	}
	for _, re := range []string{`has 0 B free of 16\.0 MiB`, `\(100% used\)`, `inodes free`, `site aura-bg holds 3 files`,
		`pruned 0 files`, `filesystem\.replace_below 512\.0 KiB`} {
		if !regexp.MustCompile(re).MatchString(p.Detail) {
			t.Errorf("detail %q lacks %s", p.Detail, re)
		}
	}
	if p.Filesystem == nil || p.Filesystem.AvailBytes != 0 {
		t.Errorf("problem's filesystem object: %+v", p.Filesystem)
	}
}

func TestLaunchInodesExhausted(t *testing.T) {
	mnt, site, body := siteOnTmpfs(t, 16<<20, 200, "")
	// Leave exactly 10 inodes free: above replace_below_inodes (5), below the need (16).
	for i := 0; ; i++ {
		var sf unix.Statfs_t
		unix.Statfs(mnt, &sf)
		if sf.Ffree <= 10 {
			break
		}
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("u%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = site
	td := startDaemon(t, body)
	status, _, p := launch(t, td, `{"need_inodes":16}`)
	if status != 507 || p.Code != api.CodeInodesExhausted {
		t.Fatalf("launch: %d %s, want inodes_exhausted: %s", status, p.Code, p.Detail)
	}
	if !strings.Contains(p.Detail, "10 of 200 inodes free") || !strings.Contains(p.Detail, "needs 16 free inodes") {
		t.Errorf("detail %q does not say how many inodes are free and needed", p.Detail)
	}
	// A call that needs fewer fits, with the replace advice absent (10 > 5).
	if status, r, p := launch(t, td, `{"need_inodes":4}`); status != 200 || r.Advice != nil {
		t.Fatalf("small launch: %d %s %+v", status, p.Detail, r.Advice)
	}
}

// TestLaunchObserveModePrunesNothing: observe mode counts what it would prune, deletes nothing.
func TestLaunchObserveModePrunesNothing(t *testing.T) {
	_, site, body := siteOnTmpfs(t, 16<<20, 0, "")
	staleJobs(t, site, 5, 10)
	td := startDaemon(t, body, func(o *Options) { o.Config.Server.Mode = api.ModeObserve })
	status, r, p := launch(t, td, `{}`)
	if status != 200 {
		t.Fatalf("launch: %d %s", status, p.Detail)
	}
	left, _ := os.ReadDir(site)
	if len(left) != 35 {
		t.Fatalf("observe mode deleted files: %d of 35 left", len(left))
	}
	if !strings.Contains(r.Detail, "would prune") {
		t.Errorf("detail %q does not say what would be pruned", r.Detail)
	}
}

// TestLaunchRefusesAMissingRequiredMount: a required mount that is not mounted fails
// the call closed with mount_unavailable naming the mount and its state.
func TestLaunchRefusesAMissingRequiredMount(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "agent")
	os.Mkdir(mp, 0o755)
	td := startDaemon(t, noSites(dir)+fmt.Sprintf(`
[[mount]]
name = "agent"
path = %q
required = true
probe_interval = "100ms"
probe_timeout = "2s"
`, mp))
	var p api.Problem
	var status int
	poll(t, time.Minute, "the mount verdict", func() bool {
		status, _, p = launch(t, td, `{}`)
		return status != 200 && strings.Contains(p.Detail, "missing")
	})
	if status != 503 || p.Code != api.CodeMountUnavailable || !strings.Contains(p.Detail, "agent") {
		t.Fatalf("launch: %d %s %s", status, p.Code, p.Detail)
	}
	h := td.d.healthNow()
	if h.Status != api.HealthCritical {
		t.Errorf("health %s with a required mount missing, want critical", h.Status)
	}
}
