package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestLaunchSeesAFillOfAMomentAgo: a launch measures its site's filesystem when it is
// called, not from the last sample or an earlier launch: 4 MiB written to the tmpfs
// right before a launch show in that launch's avail_bytes, and their removal in the
// next one's (tmpfs counts the pages at once; the sampler's 1 s interval and the status
// document play no part).
func TestLaunchSeesAFillOfAMomentAgo(t *testing.T) {
	mnt, _, body := siteOnTmpfs(t, 32<<20, 0, "")
	td := startDaemon(t, body)
	launch := func() uint64 {
		t.Helper()
		code, _, raw := td.do(t, "POST", "/v1/launch", `{"need_bytes":0}`)
		var r api.LaunchResponse
		if err := json.Unmarshal([]byte(raw), &r); err != nil || code != 200 || r.Filesystem == nil || r.Filesystem.Path != mnt {
			t.Fatalf("launch: %d %s", code, raw)
		}
		return r.Filesystem.AvailBytes
	}
	const fill = 4 << 20
	for round := range 3 {
		before := launch()
		filler := filepath.Join(mnt, "filler")
		if err := os.WriteFile(filler, make([]byte, fill), 0o644); err != nil {
			t.Fatal(err)
		}
		full := launch()
		if before < full+fill {
			t.Fatalf("round %d: avail %d before writing %d bytes, %d in the launch right after: the fill does not show", round, before, fill, full)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if after := launch(); after < full+fill {
			t.Fatalf("round %d: avail %d with the filler, %d in the launch right after its removal: the removal does not show", round, full, after)
		}
	}
}
