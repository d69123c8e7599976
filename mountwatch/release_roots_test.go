package mountwatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// releaseWithLink registers a mount with one link at linkPath, releases it, and returns
// the release's links steps.
func releaseWithLink(t *testing.T, f *fixture, linkPath string) []api.ReleaseStep {
	t.Helper()
	mnt := filepath.Join(f.base, "sess", "mnt")
	f.startAt(mnt)
	w := f.run(f.opts())
	cfg := MountConfig{Name: "sess", Path: mnt, ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second,
		Links: []LinkConfig{{Path: linkPath, Target: filepath.Join(mnt, "files")}}}
	if _, err := w.Add(cfg, Registration{Unmount: true}); err != nil {
		t.Fatal(err)
	}
	f.waitState("sess", api.MountHealthy)
	_, steps, _, err := w.Release(context.Background(), "sess", nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	var out []api.ReleaseStep
	for _, s := range steps {
		if s.Step == "links" {
			out = append(out, s)
		}
	}
	t.Logf("links steps: %+v", out)
	return out
}

func stillLinks(t *testing.T, path, target string) {
	t.Helper()
	if got, err := os.Readlink(path); err != nil || got != target {
		t.Errorf("%s was removed through the unsafe parent: %q %v", path, got, err)
	}
}

// A release removes the links sandboxd made; a link's directory that uid 65534 linked to
// a victim's directory (from a directory of its own in a sticky shared dir, where the
// kernel's protected_symlinks does not apply) holding a root-owned link of the same name
// and target: the release refuses to remove it, saying why.
func TestReleaseLinksNeverThroughASymlinkedParent(t *testing.T) {
	f := newFixture(t)
	shared := filepath.Join(f.base, "shared")
	os.Mkdir(shared, 0o755)
	unix.Chmod(shared, 0o1777)
	victim := filepath.Join(f.base, "victim")
	os.Mkdir(victim, 0o755)
	att := filepath.Join(shared, "att")
	asNobody(t, "mkdir", att)
	asNobody(t, "ln", "-s", victim, filepath.Join(att, "links"))
	target := filepath.Join(f.base, "sess", "mnt", "files")
	theirs := filepath.Join(victim, "files")
	os.Symlink(target, theirs)
	steps := releaseWithLink(t, f, filepath.Join(att, "links", "files"))
	stillLinks(t, theirs, target)
	if len(steps) != 1 || steps[0].Result != "failed" || !strings.Contains(steps[0].Detail, "is a symlink") {
		t.Errorf("links steps %+v, want one failed step naming the symlink", steps)
	}
}

// A link whose directory lies in a world-writable directory without the sticky bit (any
// user could swap it between the check and the unlink) is not removed.
func TestReleaseLinksRefusesAWorldWritableNonStickyParent(t *testing.T) {
	f := newFixture(t)
	open := filepath.Join(f.base, "open")
	os.MkdirAll(filepath.Join(open, "links"), 0o755)
	os.Chmod(open, 0o777)
	target := filepath.Join(f.base, "sess", "mnt", "files")
	link := filepath.Join(open, "links", "files")
	os.Symlink(target, link)
	steps := releaseWithLink(t, f, link)
	stillLinks(t, link, target)
	if len(steps) != 1 || steps[0].Result != "failed" || !strings.Contains(steps[0].Detail, "world-writable") {
		t.Errorf("links steps %+v, want one failed step saying the parent is world-writable", steps)
	}
}

// The control: a link in a safe directory is removed by the release.
func TestReleaseRemovesItsLink(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.base, "home")
	os.Mkdir(dir, 0o755)
	link := filepath.Join(dir, "files")
	steps := releaseWithLink(t, f, link)
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("the link sandboxd made is still there after the release: %v", err)
	}
	if len(steps) != 1 || steps[0].Result != "done" {
		t.Errorf("links steps %+v, want one done step", steps)
	}
}
