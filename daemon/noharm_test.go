package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// treeHashes is path -> sha256 of every regular file under dir.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			out[p] = hex.EncodeToString(h[:])
		}
		return nil
	})
	return out
}

func sameHashes(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestImpossibleNeedDeletesNothing: a launch whose need is above the filesystem's size,
// or above free plus everything reclaim could free, is refused at once (disk_full) with
// the fingerprint, and every cache file hashes the same after; a need reclaim can meet
// still reclaims (issue 10, item 1).
func TestImpossibleNeedDeletesNothing(t *testing.T) {
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	for i := 0; i < 8; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%d.tgz", i))
		testenv.Fill(p, 1<<20)
		os.Chtimes(p, old, old)
	}
	if err := testenv.Fill(filepath.Join(mnt, "userdata"), 40<<20); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "4MiB"
replace_below = "1MiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache)
	td := startDaemon(t, body)
	before := treeHashes(t, mnt)

	for _, c := range []struct{ need, words string }{
		{"1TiB", "no reclaim can free 1.0 TiB on a filesystem of 64.0 MiB in all"},
		{"30MiB", "reclaim could free at most"},
	} {
		status, _, p := launch(t, td, fmt.Sprintf(`{"need_bytes":%q}`, c.need))
		if status != 507 || p.Code != api.CodeDiskFull {
			t.Fatalf("need %s: %d %s, want 507 disk_full: %s", c.need, status, p.Code, p.Detail)
		}
		if !strings.Contains(p.Detail, c.words) || !strings.Contains(p.Detail, "free of 64.0 MiB") || !strings.Contains(p.Detail, "reclaim deleted nothing") {
			t.Errorf("need %s: detail %q, want %q and the fingerprint", c.need, p.Detail, c.words)
		}
		if after := treeHashes(t, mnt); !sameHashes(before, after) {
			t.Fatalf("need %s: files changed: %d before, %d after", c.need, len(before), len(after))
		}
	}
	page, _ := td.client.Events(t.Context(), 0)
	for _, ev := range page.Events {
		if ev.Kind == api.EventReclaimRun && ev.Subject == "launch" {
			t.Errorf("an impossible need ran the ladder: %s", ev.Message)
		}
	}

	// 20 MiB can be met (about 16 MiB free + 8 MiB of cache): reclaim runs and it fits.
	status, r, p := launch(t, td, `{"need_bytes":"20MiB"}`)
	if status != 200 {
		t.Fatalf("need 20MiB with 8 MiB of old cache: %d %s: %s", status, p.Code, p.Detail)
	}
	if r.Filesystem.AvailBytes < 20<<20 {
		t.Errorf("after the launch %d bytes free", r.Filesystem.AvailBytes)
	}
	if _, err := os.Stat(filepath.Join(mnt, "userdata")); err != nil {
		t.Error("user data was deleted")
	}
}
