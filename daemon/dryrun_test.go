package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestReaderMayDryRunReclaim: a dry run changes nothing, so a uid that is not a writer
// gets the plan (200, actions "planned") while its cache entries all stay; the same uid
// asking for a real reclaim, or a dry run that says dry_run false, gets 403.
func TestReaderMayDryRunReclaim(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.MkdirAll(cache, 0o755)
	old := time.Now().Add(-48 * time.Hour)
	var entries []string
	for i := 0; i < 6; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%02d.tgz", i))
		testenv.Fill(p, 1<<20)
		os.Chtimes(p, old, old)
		entries = append(entries, p)
	}
	// The disk stays above reclaim_below (so no automatic reclaim runs); the dry run asks
	// for more free space than there is, which only deleting cache entries can give.
	td := startDaemon(t, fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache))

	status, body := requestAs(t, td, 65534, 65534, nil, "POST", "/v1/reclaim", `{"dry_run":true,"release_reserve":true,"target_free":"13MiB"}`)
	if status != 200 {
		t.Fatalf("stranger's dry run: %d %s", status, body)
	}
	var run api.ReclaimRun
	if err := json.Unmarshal([]byte(body), &run); err != nil {
		t.Fatalf("dry run answer: %v: %s", err, body)
	}
	planned := 0
	for _, a := range run.Actions {
		if a.Status == api.ActionDone {
			t.Errorf("a dry run did something: %+v", a)
		}
		if a.Status == api.ActionPlanned {
			planned++
		}
	}
	if !run.DryRun || planned == 0 {
		t.Errorf("dry run %v with %d planned actions, want a plan: %s", run.DryRun, planned, body)
	}
	for _, p := range entries {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a reader's dry run deleted %s: %v", p, err)
		}
	}
	for _, b := range []string{`{}`, `{"dry_run":false}`, `{"target_free":"1MiB"}`} {
		if status, body := requestAs(t, td, 65534, 65534, nil, "POST", "/v1/reclaim", b); status != 403 {
			t.Errorf("stranger's reclaim %s: %d %s, want 403", b, status, body)
		}
	}
	for _, p := range entries {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a refused reclaim deleted %s: %v", p, err)
		}
	}
}
