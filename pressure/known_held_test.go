package pressure

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestHeldSiteLetGoWhenNoLongerAsked: a site no launch asks about any more (dropped from
// the configuration) is not held open past the next sampling tick or two: its filesystem
// unmounts (plain umount, no MNT_DETACH) although nothing changed on its way.
func TestHeldSiteLetGoWhenNoLongerAsked(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testenv.Tmpfs(t, 16<<20, 100)
	site := filepath.Join(fs, "site")
	must(t, os.Mkdir(site, 0o755))
	w := New(Options{SampleInterval: 50 * time.Millisecond})
	ctx, _ := runWatcher(t, w)
	for end := time.Now().Add(time.Minute); heldFds(t, site) != 1; {
		if time.Now().After(end) {
			t.Fatalf("MeasureSite(%s) never held it", site)
		}
		if _, err := w.MeasureSite(ctx, site); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "the site no longer asked about let go", func() bool { return heldFds(t, site) == 0 })
	if err := unix.Unmount(fs, 0); err != nil {
		t.Errorf("umount %s with its site no longer asked about: %v", fs, err)
	}
}

// TestKnownWaysLeakNoFd: many sites, held and asked again, sites that do not exist, and
// sites no longer asked about leave no fd on their filesystem once Run ends, and while
// it runs no more than one per site.
func TestKnownWaysLeakNoFd(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testenv.Tmpfs(t, 16<<20, 0)
	w := New(Options{SampleInterval: 50 * time.Millisecond})
	ctx, stop := runWatcher(t, w)
	const sites = 64
	for i := range sites {
		must(t, os.MkdirAll(filepath.Join(fs, fmt.Sprint("s", i), "site"), 0o755))
	}
	for round := range 5 {
		for i := range sites {
			for _, p := range []string{filepath.Join(fs, fmt.Sprint("s", i), "site"), filepath.Join(fs, fmt.Sprint("s", i), "missing", "site")} {
				if _, err := w.MeasureSite(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := heldUnder(t, fs, ""); n > sites {
			t.Fatalf("round %d: %d fds on %s for %d sites", round, n, fs, sites)
		}
		if round == 2 { // half the sites removed: their fds go
			for i := range sites / 2 {
				must(t, os.Remove(filepath.Join(fs, fmt.Sprint("s", i), "site"))) // by path: tests only
			}
		}
	}
	must(t, stop())
	if n := heldUnder(t, fs, ""); n != 0 {
		t.Errorf("%d fds on %s after Run returned", n, fs)
	}
}
