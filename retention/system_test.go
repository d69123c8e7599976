package retention

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// A site that is fine at start until a bind mount of /usr/share lands over its parent:
// the same path text now names /usr/share/doc, and the re-check at the reload refuses it
// by where it really is. The bind is read-only, so even a regression could not delete a
// byte of the machine's /usr.
func TestSiteBehindABindMountOfASystemDir(t *testing.T) {
	T := stickyTmpfs(t)
	site := filepath.Join(T, "b", "doc")
	expiredJobs(t, site, 3)
	cfg := siteCfg("s", site)
	cfg.Guards = []safefs.Guarded{{System: true, What: "the system directories"}}
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	if p := problemOf(t, h.m, "s"); p != "" {
		t.Fatalf("problem %q before the mount", p)
	}
	if _, err := os.Stat("/usr/share/doc"); err != nil {
		t.Skipf("this machine has no /usr/share/doc to bind: %v", err)
	}
	bind(t, "/usr/share", filepath.Join(T, "b"))
	if err := unix.Mount("", filepath.Join(T, "b"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	h.m.Reconfigure([]SiteConfig{cfg})
	waitFor(t, "the re-check to see the mount", func() bool {
		return strings.Contains(problemOf(t, h.m, "s"), "is really /usr/share/doc (a bind mount of it), which lies inside /usr: a system directory")
	})
}
