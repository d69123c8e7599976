package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestObserveLaunchSaysWould: in observe mode a launch at 0 B free with reclaimable cache
// says "reclaim would free", never "reclaim freed ... (verdict reclaimed)", and every file
// hashes the same after (issue 10, item 8).
func TestObserveLaunchSaysWould(t *testing.T) {
	mnt := testenv.Tmpfs(t, 32<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	for i := 0; i < 6; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%d.tgz", i))
		testenv.Fill(p, 1<<20)
		os.Chtimes(p, old, old)
	}
	fillToFull(t, mnt)
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
	td := startDaemon(t, body, func(o *Options) { o.Config.Server.Mode = api.ModeObserve })
	before := treeHashes(t, mnt)
	status, _, p := launch(t, td, `{"need_bytes":"2MiB"}`)
	if status == 200 {
		t.Fatalf("observe mode at 0 B free: the launch fit: %s", p.Detail)
	}
	if !strings.Contains(p.Detail, "reclaim would free 6.0 MiB") || !strings.Contains(p.Detail, "observe mode: nothing was deleted") ||
		strings.Contains(p.Detail, "reclaim freed") || strings.Contains(p.Detail, "verdict reclaimed") {
		t.Errorf("observe-mode launch detail: %s", p.Detail)
	}
	if !sameHashes(before, treeHashes(t, mnt)) {
		t.Error("observe mode changed files")
	}
	run, err := td.client.Reclaim(t.Context(), api.ReclaimRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict == api.VerdictReclaimed || run.FreedBytes != 0 || !strings.Contains(run.Detail, "would reclaim") || !strings.Contains(run.Detail, "(projected)") {
		t.Errorf("observe-mode reclaim: verdict %q freed %d: %s", run.Verdict, run.FreedBytes, run.Detail)
	}
}
