package mountwatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// A link's directory that another user (uid 65534) swapped for a symlink in a sticky
// shared dir: the repair neither removes the empty file behind the link nor makes a
// symlink there, and says why.
func TestLinkRepairNeverThroughAnAttackersParent(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{})
	os.Mkdir(filepath.Join(f.backing, "files"), 0o755)
	shared := filepath.Join(f.base, "shared")
	os.Mkdir(shared, 0o755)
	unix.Chmod(shared, 0o1777)
	victim := filepath.Join(f.base, "victim")
	os.Mkdir(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "empty"), nil, 0o644) // root's own empty marker file
	cmd := exec.Command("ln", "-s", victim, filepath.Join(shared, "links"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ln as uid 65534: %v %s", err, out)
	}
	link := filepath.Join(shared, "links", "empty")
	missing := filepath.Join(shared, "links", "missing")
	cfg := f.mountCfg("agent")
	cfg.Links = []LinkConfig{{Path: link, Target: filepath.Join(f.mnt, "files")}, {Path: missing, Target: filepath.Join(f.mnt, "files")}}
	f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	f.waitFor("the repair to be refused", func() bool {
		return len(f.eventsWith(api.EventLinkRepair, filepath.Join(shared, "links")+" is a symlink")) >= 2
	})
	fi, err := os.Lstat(filepath.Join(victim, "empty"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the victim's empty file was replaced: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(victim, "missing")); err == nil {
		t.Fatal("a link was made in the victim's directory")
	}
	for _, l := range f.mountState("agent").Links {
		if l.State != LinkError {
			t.Errorf("link %s state %s, want %s", l.Path, l.State, LinkError)
		}
	}
}
