package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestFullDiskStateStaysInMemory: with the state directory on a 100% full filesystem
// the daemon keeps answering, a reclaim still runs, and status says state is in memory.
// The reclaim climbs an expensive rung (a cache's gc command, which frees nothing here):
// since issue 23 only such a climb is recorded in the state dir (a run that found nothing
// cheap is no purge and starts no cooldown), so it is what tries to write.
func TestFullDiskStateStaysInMemory(t *testing.T) {
	mnt := testenv.Tmpfs(t, 4<<20, 0)
	stateDir := filepath.Join(mnt, "state")
	cache := filepath.Join(mnt, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreclaim_below = \"1MiB\"\nreplace_below = \"512KiB\"\nreserve = \"0\"\n"+
		"[[reclaim.cache]]\nname = \"gc-only\"\npath = %q\ncommand = [\"true\"]\nladder = \"gc\"\n", mnt, cache)
	td := startDaemon(t, body, func(o *Options) { o.Config.Server.StateDir = stateDir })
	testenv.Fill(filepath.Join(mnt, "fill"), 1<<30)
	run, err := td.client.Reclaim(context.Background(), api.ReclaimRequest{})
	if err != nil {
		t.Fatalf("reclaim on a full disk: %v", err)
	}
	if run.Verdict != api.VerdictReplace {
		t.Errorf("verdict %s on a full disk with nothing regenerable", run.Verdict)
	}
	st, err := td.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Persistent || !strings.Contains(st.State.Error, "no space") || !strings.Contains(st.State.Error, "in memory") {
		t.Fatalf("status.state %+v, want not persistent with the ENOSPC and 'in memory'", st.State)
	}
}
