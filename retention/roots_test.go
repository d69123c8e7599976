package retention

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// attacker is the uid that plays another user of the machine.
const attacker = 65534

// stickyTmpfs is a throwaway tmpfs with mode 1777, as /tmp is.
func stickyTmpfs(t *testing.T) string {
	t.Helper()
	dir := testenv.Tmpfs(t, 64<<20, 0)
	if err := unix.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asAttacker runs argv as uid 65534 in a child process.
func asAttacker(t *testing.T, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attacker, Gid: attacker}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", attacker, strings.Join(argv, " "), err, out)
	}
}

// expiredJobs writes n jobs 13 hours old (past the 12 h max_age) with dead pids.
func expiredJobs(t *testing.T, dir string, n int) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	for i := range n {
		makeJob(t, dir, "job"+string(rune('a'+i)), deadPid(t), time.Now().Add(-13*time.Hour))
	}
}

func problemOf(t *testing.T, m *Manager, site string) string {
	t.Helper()
	st, err := m.Site(site)
	if err != nil {
		t.Fatal(err)
	}
	if st.Problem == nil {
		return ""
	}
	return *st.Problem
}

func pruneAllNow(t *testing.T, m *Manager) []PruneResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m.PruneAll(ctx)
}

// Issue 9's reproduction, retention's half: a site whose path runs through another
// user's symlink to the protected home is refused; home keeps every byte.
func TestSiteThroughAnAttackersSymlink(t *testing.T) {
	T := stickyTmpfs(t)
	expiredJobs(t, filepath.Join(T, "home"), 3)
	asAttacker(t, "ln", "-s", T, filepath.Join(T, "anc2"))
	before := fingerprint(t, T)
	cfg := siteCfg("s", filepath.Join(T, "anc2", "home"))
	cfg.Guards = []safefs.Guarded{{Path: filepath.Join(T, "home"), What: "the protected path", Inside: true}}
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	res := pruneAllNow(t, h.m)
	p := problemOf(t, h.m, "s")
	if !strings.Contains(p, filepath.Join(T, "anc2")+" is a symlink") || len(res) != 1 || res[0].Problem != p || res[0].Files != 0 {
		t.Fatalf("problem %q, results %+v; want the symlinked ancestor named and nothing pruned", p, res)
	}
	if len(h.events.kinds("condition")) == 0 {
		t.Error("no SiteProblem event")
	}
	if fingerprint(t, T) != before {
		t.Fatal("files changed on the tmpfs")
	}
}

// A site whose ancestor the attacker owns (a directory they made in the sticky /tmp) is
// refused even though no link is involved: they could swap it for one at any time.
func TestSiteUnderAnAttackersDirectory(t *testing.T) {
	T := stickyTmpfs(t)
	asAttacker(t, "mkdir", "-m", "0755", filepath.Join(T, "launcher"))
	os.Chown(filepath.Join(T, "launcher"), attacker, attacker)
	expiredJobs(t, filepath.Join(T, "launcher", "bg"), 2) // root's files, made by root
	before := fingerprint(t, T)
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", filepath.Join(T, "launcher", "bg"))}})
	pruneAllNow(t, h.m)
	if p := problemOf(t, h.m, "s"); !strings.Contains(p, "owned by uid 65534") {
		t.Fatalf("problem %q, want the attacker-owned ancestor named", p)
	}
	if fingerprint(t, T) != before {
		t.Fatal("files changed on the tmpfs")
	}
}

// An ancestor replaced by a symlink between a reload and the next prune: the reload's
// re-check walks the path again, refuses the link and detaches; the prune then deletes
// nothing, neither behind the link nor in the directory the site held.
func TestAncestorReplacedBySymlinkBeforeThePrune(t *testing.T) {
	T := stickyTmpfs(t)
	site := filepath.Join(T, "a", "site")
	os.MkdirAll(site, 0o755)
	expiredJobs(t, filepath.Join(T, "victim", "site"), 3)
	cfg := siteCfg("s", site)
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	if p := problemOf(t, h.m, "s"); p != "" {
		t.Fatalf("problem %q on a sound site", p)
	}
	expiredJobs(t, site, 2) // new expired jobs the held root would drain
	os.Rename(filepath.Join(T, "a"), filepath.Join(T, "a.old"))
	os.Symlink(filepath.Join(T, "victim"), filepath.Join(T, "a"))
	before := fingerprint(t, filepath.Join(T, "victim"))
	if err := h.m.Reconfigure([]SiteConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the re-check to refuse the link", func() bool {
		return strings.Contains(problemOf(t, h.m, "s"), "is a symlink")
	})
	res := pruneAllNow(t, h.m)
	if len(res) != 1 || res[0].Files != 0 || res[0].Problem == "" {
		t.Fatalf("prune after the swap: %+v", res)
	}
	if fingerprint(t, filepath.Join(T, "victim")) != before {
		t.Fatal("the victim behind the swapped ancestor changed")
	}
}

// A bind mount over an ancestor that puts the site's path inside the protected path, and
// a site reached through a bind-mounted alias of it: both are refused by device+inode,
// which the text of the paths never shows.
func TestProtectedPathReachedThroughABindMount(t *testing.T) {
	T := stickyTmpfs(t)
	home := filepath.Join(T, "home")
	expiredJobs(t, filepath.Join(home, "site"), 3)
	os.MkdirAll(filepath.Join(T, "b", "site"), 0o755)
	guards := []safefs.Guarded{{Path: home, What: "the protected path " + home, Inside: true}}
	over := siteCfg("over", filepath.Join(T, "b", "site"))
	over.Guards = guards
	os.Mkdir(filepath.Join(T, "alias"), 0o755)
	bind(t, home, filepath.Join(T, "alias"))
	alias := siteCfg("alias", filepath.Join(T, "alias", "site"))
	alias.Guards = guards
	before := fingerprint(t, home)
	h := run(t, Options{Sites: []SiteConfig{over, alias}})
	if p := problemOf(t, h.m, "over"); p != "" {
		t.Fatalf("problem %q before the mount", p)
	}
	if p := problemOf(t, h.m, "alias"); !strings.Contains(p, "lies inside the protected path") {
		t.Fatalf("alias site: problem %q, want inside the protected path", p)
	}
	bind(t, home, filepath.Join(T, "b"))
	h.m.Reconfigure([]SiteConfig{over, alias})
	waitFor(t, "the re-check to see the mount", func() bool {
		return strings.Contains(problemOf(t, h.m, "over"), "lies inside the protected path")
	})
	pruneAllNow(t, h.m)
	if fingerprint(t, home) != before {
		t.Fatal("the protected home changed")
	}
}

func bind(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
}

// The site's owner (uid 65534, whose directories on the way are trusted because the root
// is theirs) swaps their own parent directory for a link to a root-owned tree between a
// reload and the next prune: the re-check refuses the link and the tree keeps every byte.
func TestSiteOwnerSwapsTheirParentForALink(t *testing.T) {
	T := stickyTmpfs(t)
	asAttacker(t, "mkdir", "-p", filepath.Join(T, "launcher", "bg"))
	expiredJobs(t, filepath.Join(T, "victim", "bg"), 3)
	cfg := siteCfg("s", filepath.Join(T, "launcher", "bg"))
	cfg.OwnerUIDs = []uint32{attacker}
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	if p := problemOf(t, h.m, "s"); p != "" {
		t.Fatalf("problem %q on the owner's own site", p)
	}
	before := fingerprint(t, filepath.Join(T, "victim"))
	asAttacker(t, "mv", filepath.Join(T, "launcher"), filepath.Join(T, "launcher.old"))
	asAttacker(t, "ln", "-s", filepath.Join(T, "victim"), filepath.Join(T, "launcher"))
	if err := h.m.Reconfigure([]SiteConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the re-check to refuse the owner's link", func() bool {
		return strings.Contains(problemOf(t, h.m, "s"), filepath.Join(T, "launcher")+" is a symlink")
	})
	pruneAllNow(t, h.m)
	if fingerprint(t, filepath.Join(T, "victim")) != before {
		t.Fatal("the root-owned tree behind the owner's link changed")
	}
}
