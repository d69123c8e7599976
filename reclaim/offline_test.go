package reclaim

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// With offline set, caches only a download refills (npm, pip here) keep every file, hashed
// before and after, while go-build, a declared cache and site entries are reclaimed; the
// detail names what was kept and why (CONTRACT §6, issue 10 item 6).
func TestOfflineKeepsCachesOnlyADownloadRefills(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 20*mib) // ~60 MiB short of 64 MiB + headroom
	npm, pip := filepath.Join(e.home, ".npm"), filepath.Join(e.home, ".cache", "pip")
	npmBefore, pipBefore := hashTree(t, npm), hashTree(t, pip)
	o := e.options()
	o.Offline = true
	o.Caches = []CacheConfig{{Name: "declared", Path: filepath.Join(e.root, "declared"), Order: 200}}
	o.PruneSites = sitePruner(filepath.Join(e.root, "site"))
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, npmBefore, hashTree(t, npm))
	sameTree(t, pipBefore, hashTree(t, pip))
	if n := countFiles(filepath.Join(e.home, ".cache", "go-build")); n != 0 {
		t.Errorf("offline: go-build (a build output) still has %d files", n)
	}
	if n := countFiles(filepath.Join(e.root, "site")); n != 0 {
		t.Errorf("offline: site still has %d expired files", n)
	}
	if n := countFiles(filepath.Join(e.root, "declared")); n == 10 {
		t.Errorf("offline: the declared cache was not reclaimed")
	}
	if !strings.Contains(run.Detail, "kept npm, pip (reclaim.offline: only a download refills them)") {
		t.Errorf("detail does not say what was kept and why: %s", run.Detail)
	}
	if strings.Count(run.Detail, "npm") != 1 {
		t.Errorf("npm named more than once: %s", run.Detail)
	}
	if !r.Offline() {
		t.Error("Offline() false")
	}
}
