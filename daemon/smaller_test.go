package daemon

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// One refusal never says "pruned 252 files" and "nothing was deleted" (issue 23 item 8):
// the site's retention pruned its expired entries, and what deleted nothing is reclaim,
// which an impossible need does not run.
func TestImpossibleNeedAfterAPruneSaysWhoDeletedNothing(t *testing.T) {
	_, _, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body)
	status, _, p := launch(t, td, `{"need_bytes":"1TiB"}`)
	if status != 507 || p.Code != api.CodeDiskFull {
		t.Fatalf("%d %s: %s", status, p.Code, p.Detail)
	}
	if !strings.Contains(p.Detail, "files (0 B) in this call") || !strings.Contains(p.Detail, "reclaim deleted nothing") ||
		strings.Contains(p.Detail, "nothing was deleted") {
		t.Errorf("detail: %s", p.Detail)
	}
}
