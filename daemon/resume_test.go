package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestResumeVerdicts drives POST /v1/resume on a tmpfs through the three verdicts:
// healthy with nothing walked, reclaimed from a declared cache (user files untouched),
// and replace with usage naming what fills the disk; a second resume within 10 s is
// the cached result.
func TestResumeVerdicts(t *testing.T) {
	mnt := testenv.Tmpfs(t, 32<<20, 0)
	cache := filepath.Join(mnt, "cache")
	home := filepath.Join(mnt, "home")
	os.MkdirAll(cache, 0o755)
	os.MkdirAll(home, 0o755)
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "2MiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache)
	td := startDaemon(t, body)
	resume := func() api.ReclaimRun {
		t.Helper()
		status, _, raw := td.do(t, "POST", "/v1/resume", `{"deadline":"20s"}`)
		var run api.ReclaimRun
		if status != 200 || json.Unmarshal([]byte(raw), &run) != nil {
			t.Fatalf("resume: %d %s", status, raw)
		}
		return run
	}
	if run := resume(); run.Verdict != api.VerdictHealthy {
		t.Fatalf("healthy box: verdict %s: %s", run.Verdict, run.Detail)
	}
	if run := resume(); run.Cached || run.Verdict != api.VerdictHealthy {
		t.Error("a healthy resume within 10 s was not measured afresh")
	}

	// Caches of old entries, then user data until the disk is full.
	old := time.Now().Add(-48 * time.Hour)
	for i := 0; i < 12; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%02d.tgz", i))
		testenv.Fill(p, 1<<20)
		os.Chtimes(p, old, old)
	}
	userFile := filepath.Join(home, "notes.txt")
	os.WriteFile(userFile, []byte("keep me"), 0o644)
	testenv.Fill(filepath.Join(home, "big"), 1<<30)

	ctx := context.Background()
	run, err := td.client.Reclaim(ctx, api.ReclaimRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictReclaimed || run.FreedBytes <= 0 {
		t.Fatalf("full disk with a cache: verdict %s freed %d: %s", run.Verdict, run.FreedBytes, run.Detail)
	}
	if b, err := os.ReadFile(userFile); err != nil || string(b) != "keep me" {
		t.Fatal("a user file changed during reclaim")
	}
	if _, err := os.Stat(filepath.Join(home, "big")); err != nil {
		t.Fatal("user data was deleted")
	}

	// Now only user data is left to fill the disk: replace, with usage naming home.
	testenv.Fill(filepath.Join(home, "big2"), 1<<30)
	run, err = td.client.Reclaim(ctx, api.ReclaimRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictReplace || !strings.Contains(run.Detail, "replace_below") {
		t.Fatalf("user data only: verdict %s: %s", run.Verdict, run.Detail)
	}
	named := false
	for _, u := range run.Usage {
		if strings.HasPrefix(u.Path, home) {
			named = true
		}
	}
	if !named {
		t.Errorf("usage %+v does not name %s", run.Usage, home)
	}
	st := td.d.Status()
	if st.Reclaim == nil || st.Reclaim.Verdict != api.VerdictReplace {
		t.Errorf("status.reclaim %+v", st.Reclaim)
	}
}
