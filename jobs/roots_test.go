package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func nobodyCmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd
}

// The ground the jobs' rmdirs by path stand on (safepath.go): in a cgroup delegated to
// uid 65534, the attacker may make sub-cgroups but can neither plant a symlink nor rename
// a cgroup, so nothing below the cgroup root can be swapped; root cannot either.
func TestCgroup2HasNoLinksNorRenames(t *testing.T) {
	root := testRoot(t)
	att := filepath.Join(root, "att")
	if err := os.MkdirAll(att, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(att, 65534, 65534)
	if out, err := nobodyCmd("mkdir", filepath.Join(att, "x")).CombinedOutput(); err != nil {
		t.Fatalf("uid 65534 cannot make a cgroup in the cgroup delegated to it (the test proves nothing): %v %s", err, out)
	}
	for _, c := range []*exec.Cmd{
		nobodyCmd("ln", "-s", "/etc", filepath.Join(att, "link")),
		nobodyCmd("mv", "-T", filepath.Join(att, "x"), filepath.Join(att, "y")),
		exec.Command("ln", "-s", "/etc", filepath.Join(att, "link")),
		exec.Command("mv", "-T", filepath.Join(att, "x"), filepath.Join(att, "y")),
	} {
		if out, err := c.CombinedOutput(); err == nil {
			t.Errorf("%v (as uid 65534: %v) succeeded on cgroup2: %s", c.Args, c.SysProcAttr != nil, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(att, "x")); err != nil {
		t.Errorf("the cgroup is gone after the failed rename: %v", err)
	}
}

// A cgroup root below a cgroup another user owns (they could make and remove cgroups where
// sandboxd creates and removes its own) is refused with the reason, before anything is
// made there.
func TestCgroupRootBelowAnotherUsersCgroupRefused(t *testing.T) {
	root := testRoot(t)
	att := filepath.Join(root, "att")
	os.MkdirAll(att, 0o755)
	os.Chown(att, 65534, 65534)
	for _, cr := range []string{filepath.Join(att, "sandboxd"), filepath.Join(att, "a", "sandboxd")} {
		m := New(Options{CgroupRoot: cr})
		ok, why := m.Available()
		if ok || !strings.Contains(why, "uid 65534") {
			t.Errorf("cgroup_root %s: available %v (%s), want a refusal naming uid 65534", cr, ok, why)
		}
	}
	ents, _ := os.ReadDir(att)
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("a cgroup was made below the refused root: %s", e.Name())
		}
	}
}

// removeTree removes cgroups only: a path that is no cgroup (a state file naming one
// elsewhere) is left alone, even empty.
func TestRemoveTreeOnlyRemovesCgroups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	os.Mkdir(dir, 0o755)
	if err := removeTree(dir); err == nil || !strings.Contains(err.Error(), "not a cgroup2 directory") {
		t.Errorf("removeTree of a plain directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the plain directory was removed: %v", err)
	}
}
