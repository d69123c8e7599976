package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestDryRunPrunesNoSite: `sandboxd reclaim --dry-run` (open to every reader of the
// socket) plans rung 1 from the site's index and deletes nothing. It once ran the real
// prune: with a backlog of expired entries it answered "done prune_site ... 18,512 files;
// dry run: nothing was changed" and the files were gone.
func TestDryRunPrunesNoSite(t *testing.T) {
	site := t.TempDir()
	old := time.Now().Add(-48 * time.Hour)
	const n = 3000 // a backlog the background drain (500 files/s) needs seconds for
	for i := range n {
		p := filepath.Join(site, fmt.Sprintf("job%d.out", i))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	td := startDaemon(t, fmt.Sprintf("[[site]]\nname = \"s\"\npath = %q\nmax_age = \"1h\"\n", site))
	ctx := context.Background()
	run, err := td.client.Reclaim(ctx, api.ReclaimRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range run.Actions {
		if a.Kind == api.ActionPruneSite && a.Status != api.ActionPlanned {
			t.Errorf("dry run: %s action %s (%d files); want planned", a.Source, a.Status, a.FreedFiles)
		}
	}
	page, err := td.client.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if ev.Kind == api.EventPrune && ev.Fields["trigger"] != "drain" {
			t.Errorf("a prune other than the background drain ran: %s (trigger %v)", ev.Message, ev.Fields["trigger"])
		}
	}
}
