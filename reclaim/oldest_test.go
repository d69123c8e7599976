package reclaim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A real run deletes directory entries in one walk each, tracking the deficit from what
// each deletion freed. In a cache whose directory entries are hard-linked into a project
// (they free nothing), at most one entry goes before the cache is judged by estimate,
// entry by entry: the rest stay. A plain cache beside it is reclaimed as before.
func TestOnePassLeavesHardLinkedDirEntries(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow, e.replaceBelow = 24*mib, 4*mib
	proj := filepath.Join(e.home, "app")
	linkedCache := filepath.Join(e.root, "linked")
	for i := 0; i < 8; i++ {
		entry := filepath.Join(linkedCache, fmt.Sprintf("pkg%d", i))
		src := filepath.Join(proj, fmt.Sprintf("f%d.js", i))
		writeFile(t, src, 256<<10, 72*time.Hour)
		mustMkdir(t, entry)
		if err := os.Link(src, filepath.Join(entry, "index.js")); err != nil {
			t.Fatal(err)
		}
		ageDir(entry, time.Duration(80+i)*time.Hour) // oldest first: these go before the plain ones
	}
	plain := filepath.Join(e.root, "plain")
	for i := 0; i < 8; i++ {
		entry := filepath.Join(plain, fmt.Sprintf("pkg%d", i))
		writeFile(t, filepath.Join(entry, "blob"), mib, 30*time.Hour)
		ageDir(entry, 30*time.Hour)
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 16*mib)
	o := e.options()
	o.AutoCaches = nil
	o.Caches = []CacheConfig{{Name: "linked", Path: linkedCache, Ladder: LadderEntries}, {Name: "plain", Path: plain, Ladder: LadderEntries}}
	r := e.newReclaimer(o)
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	t.Logf("detail: %s", run.Detail)
	if n := countFiles(linkedCache); n < 7 {
		t.Errorf("hard-linked cache lost %d of 8 entries for no gain; at most 1 may go", 8-n)
	}
	if n := countFiles(proj); n != 8 {
		t.Errorf("project has %d files, want 8", n)
	}
	if n := countFiles(plain); n == 8 {
		t.Errorf("plain cache untouched: %+v", run.Actions)
	}
	if run.FreedBytes < mib {
		t.Errorf("freed %d bytes, want the plain cache's entries", run.FreedBytes)
	}
}
