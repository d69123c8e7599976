package reclaim

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

// asAttacker runs argv as uid 65534, another user of the machine, in a child process.
func asAttacker(t *testing.T, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid 65534: %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func skippedWith(run api.ReclaimRun, path, why string) bool {
	for _, a := range run.Actions {
		if a.Path == path && a.Status == api.ActionSkipped && strings.Contains(a.Error, why) {
			return true
		}
	}
	return false
}

// Issue 9's reproduction, reclaim's half: on a 1777 tmpfs another user links $T/anc3 to a
// root-owned tree, and a declared cache's path runs through the link. The cache is
// skipped with the reason and an event; the tree behind the link keeps every byte, while
// a real cache beside it is emptied.
func TestCacheThroughAnAttackersSymlinkedParent(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	if err := unix.Chmod(e.root, 0o1777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(e.root, "outside", "victim")
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(victim, "cache", n, "blob"), 4*mib, 48*time.Hour)
		ageDir(filepath.Join(victim, "cache", n), 48*time.Hour)
	}
	real := filepath.Join(e.root, "real")
	for _, n := range []string{"a", "b"} {
		writeFile(t, filepath.Join(real, n, "blob"), mib, 48*time.Hour)
		ageDir(filepath.Join(real, n), 48*time.Hour)
	}
	asAttacker(t, "ln", "-s", victim, filepath.Join(e.root, "anc3"))
	before, beforeHome := hashTree(t, filepath.Join(e.root, "outside")), hashTree(t, e.home)
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 8*mib)
	o := e.options()
	o.AutoCaches = nil
	via := filepath.Join(e.root, "anc3", "cache")
	o.Caches = []CacheConfig{{Name: "victim", Path: via, Order: 1}, {Name: "real", Path: real, Order: 2}}
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: 120 * mib})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, before, hashTree(t, filepath.Join(e.root, "outside")))
	sameTree(t, beforeHome, hashTree(t, e.home))
	if !skippedWith(run, via, filepath.Join(e.root, "anc3")+" is a symlink") {
		t.Errorf("the cache through the link was not skipped with its reason: %+v", run.Actions)
	}
	if exists(filepath.Join(real, "a")) || exists(filepath.Join(real, "b")) {
		t.Error("the real cache beside it was not emptied")
	}
	var refused bool
	for _, ev := range e.events {
		refused = refused || ev.Kind == api.EventRefusal && strings.Contains(ev.Message, "is a symlink")
	}
	if !refused {
		t.Error("no refusal event")
	}
	for _, ci := range r.Caches() {
		if ci.Path == via && !strings.Contains(ci.Problem, "is a symlink") {
			t.Errorf("status shows the refused cache with problem %q", ci.Problem)
		}
	}
}

// A cache root that is the protected home through a bind-mounted alias, one that
// contains the state dir, and one under an ancestor the attacker owns: all skipped, by
// device+inode and by owner, whatever their text says.
func TestCacheRootsRefusedByIdentity(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	if err := unix.Chmod(e.root, 0o1777); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(e.root, "home")
	writeFile(t, filepath.Join(e.home, "work", "keep.bin"), mib, 48*time.Hour)
	ageDir(filepath.Join(e.home, "work"), 48*time.Hour)
	alias := filepath.Join(e.root, "alias")
	mustMkdir(t, alias)
	if err := unix.Mount(home, alias, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(alias, unix.MNT_DETACH) })
	stateParent := filepath.Join(e.root, "st")
	writeFile(t, filepath.Join(stateParent, "sandboxd", "reclaim.json"), 100, 48*time.Hour)
	ageDir(filepath.Join(stateParent, "sandboxd"), 48*time.Hour)
	asAttacker(t, "mkdir", filepath.Join(e.root, "theirs"))
	writeFile(t, filepath.Join(e.root, "theirs", "cache", "x", "blob"), mib, 48*time.Hour)
	ageDir(filepath.Join(e.root, "theirs", "cache", "x"), 48*time.Hour)

	before := map[string]map[string]string{}
	for _, d := range []string{home, stateParent, filepath.Join(e.root, "theirs")} {
		before[d] = hashTree(t, d)
	}
	e.fillTo(filepath.Join(e.root, "bulk.bin"), 8*mib)
	o := e.options()
	o.AutoCaches = nil
	o.Guards = []safefs.Guarded{
		{Path: home, What: "the protected path " + home},
		{Path: filepath.Join(stateParent, "sandboxd"), What: "the state directory"},
	}
	o.Caches = []CacheConfig{
		{Name: "aliastop", Path: alias, Order: 2},
		{Name: "state", Path: stateParent, Order: 3},
		{Name: "theirs", Path: filepath.Join(e.root, "theirs", "cache"), Order: 4},
	}
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: 120 * mib})
	if err != nil {
		t.Fatal(err)
	}
	for d, h := range before {
		sameTree(t, h, hashTree(t, d))
	}
	for path, why := range map[string]string{
		alias:                                    "is the protected path",
		stateParent:                              "contains the state directory",
		filepath.Join(e.root, "theirs", "cache"): "owned by uid 65534",
	} {
		if !skippedWith(run, path, why) {
			t.Errorf("cache %s not skipped with %q: %+v", path, why, run.Actions)
		}
	}
}

// The reserve file's directory swapped for a link to a directory holding another file
// named "reserve": releasing it unlinks nothing there, and arming it writes nothing there.
func TestReserveNeverReachedThroughASwappedParent(t *testing.T) {
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow, e.replaceBelow = 4*mib, 2*mib
	dir := filepath.Join(e.root, "state")
	mustMkdir(t, dir)
	resPath := filepath.Join(dir, "reserve")
	o := e.options()
	o.Reserves = []ReserveConfig{{Filesystem: e.root, Path: resPath, Bytes: 4 * mib}}
	r := e.newReclaimer(o)
	r.reserveTick(context.Background())
	if !exists(resPath) {
		t.Fatal("reserve not created")
	}
	victim := filepath.Join(e.root, "victim")
	writeFile(t, filepath.Join(victim, "reserve"), mib, time.Hour)
	before := hashTree(t, victim)
	if err := unix.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Symlink(victim, dir); err != nil {
		t.Fatal(err)
	}
	run, _ := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, ReleaseReserve: true})
	sameTree(t, before, hashTree(t, victim))
	var failed bool
	for _, a := range run.Actions {
		failed = failed || a.Kind == api.ActionReleaseReserve && a.Status == api.ActionFailed && strings.Contains(a.Error, "is a symlink")
	}
	if !failed {
		t.Errorf("release through the link: %+v, want a failed action naming the link", run.Actions)
	}
	if err := createReserve(resPath, mib); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("createReserve through the link = %v", err)
	}
	sameTree(t, before, hashTree(t, victim))
	if exists(filepath.Join(victim, ".reserve.tmp")) {
		t.Error("a temp file was written through the link")
	}
}
