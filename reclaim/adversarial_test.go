package reclaim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"golang.org/x/sys/unix"
)

// ageLink sets a symlink's own times (not its target's).
func ageLink(t *testing.T, p string, age time.Duration) {
	old := unix.NsecToTimespec(time.Now().Add(-age).UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

func ageDir(p string, age time.Duration) {
	old := time.Now().Add(-age)
	os.Chtimes(p, old, old)
}

// Symlinks into the home, a bind mount of a home directory inside a cache, hard links
// shared between a cache and the home, and a cache root swapped for a symlink: reclaim
// empties the caches that are really caches and the home keeps every byte.
func TestAdversarialCachesNeverReachTheHome(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	proj := filepath.Join(e.home, "project")
	writeFile(t, filepath.Join(proj, "secret.txt"), 64<<10, 100*time.Hour)
	writeFile(t, filepath.Join(proj, "linked.bin"), 256<<10, 100*time.Hour)
	writeFile(t, filepath.Join(e.home, "victim", "keep.txt"), 4096, 100*time.Hour)

	// go-build with a symlink entry pointing into the home.
	gb := filepath.Join(e.home, ".cache", "go-build")
	goBuildCache(t, gb, 40, 256<<10, 48*time.Hour)
	link := filepath.Join(gb, "0a", "feed-d")
	os.Symlink(filepath.Join(proj, "secret.txt"), link)
	ageLink(t, link, 50*time.Hour)

	// A declared cache with: a dir entry holding a bind mount of a home dir; a dir entry
	// that is a symlink to the project; a dir with a hard link to a home file.
	decl := filepath.Join(e.root, "decl")
	for i := 0; i < 10; i++ {
		writeFile(t, filepath.Join(decl, fmt.Sprintf("e%d", i), "blob"), mib, 30*time.Hour)
		ageDir(filepath.Join(decl, fmt.Sprintf("e%d", i)), 30*time.Hour)
	}
	mnt := filepath.Join(decl, "withmount", "m")
	mustMkdir(t, mnt)
	writeFile(t, filepath.Join(decl, "withmount", "blob"), mib, 30*time.Hour)
	if err := unix.Mount(proj, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	ageDir(filepath.Join(decl, "withmount"), 30*time.Hour)
	os.Symlink(proj, filepath.Join(decl, "linkdir"))
	ageLink(t, filepath.Join(decl, "linkdir"), 30*time.Hour)
	mustMkdir(t, filepath.Join(decl, "hl"))
	if err := os.Link(filepath.Join(proj, "linked.bin"), filepath.Join(decl, "hl", "linked.bin")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(decl, "hl", "own.bin"), 512<<10, 30*time.Hour)
	ageDir(filepath.Join(decl, "hl"), 30*time.Hour)

	// A declared cache whose root was swapped for a symlink to the home.
	swapped := filepath.Join(e.root, "swapped")
	os.Symlink(filepath.Join(e.home, "victim"), swapped)

	before := hashTree(t, e.home)
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 8*mib)
	o := e.options()
	o.AutoCaches = []string{"go-build"}
	o.Caches = []CacheConfig{
		{Name: "swapped", Path: swapped, Order: 1},
		{Name: "decl", Path: decl, Order: 2},
	}
	// Everything must go to meet the target: whole caches (rung 4) included.
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: 120 * mib})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detail: %s", run.Detail)
	sameTree(t, before, hashTree(t, e.home))
	if b, err := os.ReadFile(filepath.Join(proj, "linked.bin")); err != nil || len(b) != 256<<10 {
		t.Errorf("home's hard link lost: %v (%d bytes)", err, len(b))
	}
	if !exists(filepath.Join(mnt, "secret.txt")) {
		t.Errorf("bind-mounted home dir lost its files")
	}
	var swappedSkipped bool
	for _, a := range run.Actions {
		if a.Path == swapped && a.Status == api.ActionSkipped && strings.Contains(a.Error, "symlink") {
			swappedSkipped = true
		}
	}
	if !swappedSkipped {
		t.Errorf("symlinked cache root not refused: %+v", run.Actions)
	}
	// The symlink entry frees no bytes, so the byte-driven ladder may leave it; every
	// real entry is gone, and the declared cache's symlink went as a link.
	if n := countFiles(gb); n > 1 {
		t.Errorf("go-build kept %d entries", n)
	}
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink entry %s is no longer a symlink", link)
	}
	if exists(filepath.Join(decl, "linkdir")) {
		t.Errorf("the declared cache's symlink entry survived a whole-cache reclaim")
	}
	for i := 0; i < 10; i++ {
		if exists(filepath.Join(decl, fmt.Sprintf("e%d", i))) {
			t.Errorf("declared entry e%d survived a whole-cache reclaim", i)
		}
	}
	if !exists(filepath.Join(decl, "withmount")) {
		t.Errorf("the entry holding a mount point was deleted around it")
	}
}

// A pnpm store whose files are hard-linked into a project frees nothing when deleted:
// the ladder leaves it (no entry deleted, no whole-store wipe) and says replace.
func TestPnpmStoreHardLinkedIntoProjectIsNotWipedForNothing(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow, e.replaceBelow = 8*mib, 4*mib
	store := filepath.Join(e.home, ".local", "share", "pnpm", "store", "v3", "files")
	nm := filepath.Join(e.home, "app", "node_modules", ".pnpm")
	for i := 0; i < 50; i++ {
		f := filepath.Join(store, fmt.Sprintf("%02x", i), fmt.Sprintf("%040x", i))
		writeFile(t, f, 128<<10, 72*time.Hour)
		mustMkdir(t, nm)
		if err := os.Link(f, filepath.Join(nm, fmt.Sprintf("f%d.js", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 2*mib)
	o := e.options()
	o.AutoCaches = []string{"pnpm"}
	r := e.newReclaimer(o)
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	t.Logf("detail: %s", run.Detail)
	if n := countFiles(store); n != 50 {
		t.Errorf("pnpm store lost %d hard-linked files for no gain", 50-n)
	}
	if run.Verdict != api.VerdictReplace {
		t.Errorf("verdict %q, want replace", run.Verdict)
	}
	var skipped bool
	for _, a := range run.Actions {
		skipped = skipped || a.Status == api.ActionSkipped && strings.Contains(a.Error, "hard-linked")
	}
	if !skipped {
		t.Errorf("no skipped action explains the store was kept: %+v", run.Actions)
	}
}

// At 100% full the ladder still works.
func TestReclaimAtHundredPercent(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	e.reclaimBelow, e.replaceBelow = 16*mib, 4*mib
	goBuildCache(t, filepath.Join(e.home, ".cache", "go-build"), 200, 200<<10, 48*time.Hour)
	testFill(t, filepath.Join(e.home, "bulk.bin"))
	if a := e.avail(); a > 0 {
		t.Fatalf("not full: %d free", a)
	}
	o := e.options()
	o.AutoCaches = []string{"go-build"}
	r := e.newReclaimer(o)
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	t.Logf("detail: %s", run.Detail)
	if run.Verdict != api.VerdictReclaimed || e.avail() < 32*mib {
		t.Errorf("at 100%%: verdict %q, free %d", run.Verdict, e.avail())
	}
}

// At 0 free inodes the ladder still works, directory entries included (the trash is a
// rename, which needs no new inode).
func TestReclaimAtZeroFreeInodes(t *testing.T) {
	e := newEnv(t, 64*mib, 3000)
	e.reclaimBelow, e.replaceBelow = 0, 0
	e.reclaimInodes, e.replaceInod = 300, 50
	decl := filepath.Join(e.root, "decl")
	for i := 0; i < 60; i++ {
		d := filepath.Join(decl, fmt.Sprintf("pkg%02d", i))
		for j := 0; j < 10; j++ {
			writeFile(t, filepath.Join(d, fmt.Sprintf("f%d", j)), 100, 10*time.Hour)
		}
		ageDir(d, 10*time.Hour+time.Duration(i)*time.Minute)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(e.home, fmt.Sprintf("u%05d", i)))
		if err != nil {
			break
		}
		f.Close()
	}
	m, _ := e.measure(context.Background(), e.root)
	if m.FilesFree != 0 {
		t.Fatalf("%d inodes still free", m.FilesFree)
	}
	o := e.options()
	o.AutoCaches = nil
	o.Caches = []CacheConfig{{Name: "decl", Path: decl}}
	r := e.newReclaimer(o)
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerResume})
	t.Logf("detail: %s", run.Detail)
	m, _ = e.measure(context.Background(), e.root)
	if run.Verdict != api.VerdictReclaimed || m.FilesFree < 300 {
		t.Errorf("at 0 inodes: verdict %q, %d inodes free", run.Verdict, m.FilesFree)
	}
	if n := countFiles(decl); n == 0 {
		t.Errorf("every package went although the inode target needed only some")
	}
	if !strings.Contains(run.Detail, "inodes free") {
		t.Errorf("detail: %s", run.Detail)
	}
}
