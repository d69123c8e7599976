package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestFilesystemUnavailableExits: a watched path that is removed cannot be measured. The
// launch on its filesystem exits 75 filesystem_unavailable naming the path and ENOENT;
// resume answers for the other filesystem, names this one, and exits 75 (not 0);
// check is CRITICAL; nothing is deleted.
func TestFilesystemUnavailableExits(t *testing.T) {
	good := testenv.Tmpfs(t, 16<<20, 0)
	bad := testenv.Tmpfs(t, 16<<20, 0)
	watched, site := filepath.Join(bad, "watched"), filepath.Join(bad, "site")
	os.Mkdir(watched, 0o755)
	os.Mkdir(site, 0o755)
	job := filepath.Join(site, "job.out")
	testenv.Fill(job, 4<<10)
	_, sock, _ := serveDaemon(t, openTempDir(t), fmt.Sprintf(`[[site]]
name = "s"
path = %q
[[filesystem]]
path = %q
reserve = "0"
reclaim_below = "1MiB"
replace_below = "0"
[[filesystem]]
path = %q
reserve = "0"
reclaim_below = "1MiB"
replace_below = "0"
`, site, good, watched))
	env := []string{"SANDBOXD_SOCKET=" + sock}
	if r := sandboxd(t, env, "resume"); r.code != 0 {
		t.Fatalf("resume before the removal: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	os.Remove(watched)
	var r result
	testenv.Eventually(t, time.Minute, "launch to exit 75", func() bool {
		r = sandboxd(t, env, "launch", "--site", "s")
		return r.code == 75
	})
	if !strings.Contains(r.stderr, "filesystem_unavailable") || !strings.Contains(r.stderr, watched+" cannot be measured") ||
		!strings.Contains(r.stderr, "(ENOENT)") {
		t.Errorf("launch: stderr %q", r.stderr)
	}
	r = sandboxd(t, env, "resume")
	if r.code != 75 || !strings.Contains(r.stdout, "not measured, so no verdict for it: "+watched) {
		t.Errorf("resume with one of two filesystems unmeasured: exit %d (want 75)\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sandboxd(t, env, "status"); r.code != 0 || !strings.Contains(r.stdout, "UNAVAILABLE: "+watched+" cannot be measured") {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sandboxd(t, env, "check"); r.code != 2 || !strings.Contains(r.stdout, "FilesystemUnavailable") {
		t.Errorf("check: exit %d (want 2 CRITICAL)\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(job); err != nil {
		t.Errorf("the site's job file is gone: %v", err)
	}
}
