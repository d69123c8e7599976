package retention

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMissingRootIsNotAProblem: a site whose directory does not exist yet (a fresh
// machine) raises no condition and is attached, and cleaned, once the launcher creates it.
func TestMissingRootIsNotAProblem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "aura-bg")
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	if c := h.m.Conditions(); len(c) != 0 {
		t.Fatalf("a missing site root raised %+v", c)
	}
	if s, _ := h.m.Site("s"); s.Problem != nil {
		t.Fatalf("a missing site root has problem %q", *s.Problem)
	}
	os.Mkdir(dir, 0o755)
	names := makeJob(t, dir, "old1", deadPid(t), time.Now().Add(-13*time.Hour))
	// Indexed, or already pruned: the drain is free to delete the stale job as soon as it
	// is indexed, so the indexed state alone may be too brief to observe.
	waitFor(t, "the new root to be attached and indexed", func() bool {
		s, _ := h.m.Site("s")
		return s.Files == int64(len(names)) || s.PrunedTotal == int64(len(names))
	})
	pruneNow(t, h.m, "s")
	waitFor(t, "the stale job pruned", func() bool { return !exists(dir, names[0]) })
}
