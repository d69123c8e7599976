package mountwatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func asNobody(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v as uid 65534: %v %s", name, args, err, out)
	}
}

// probeArena is a fresh tmpfs holding a directory of mode dirMode for the attacker to play
// in and a root-owned victim directory.
func probeArena(t *testing.T, dirMode uint32) (play, victim string) {
	t.Helper()
	T := testenv.Tmpfs(t, 1<<20, 0)
	play = filepath.Join(T, "play")
	os.Mkdir(play, 0o755)
	unix.Chmod(play, dirMode)
	victim = filepath.Join(T, "victim")
	os.Mkdir(victim, 0o755)
	return play, victim
}

// A mount path whose parent another user (uid 65534) made a symlink in a sticky shared
// dir: the probe does not follow it (it reports the link, op opendir, errno ELOOP) and
// creates nothing in the directory the link points to.
func TestProbeNeverThroughASymlinkedParent(t *testing.T) {
	play, victim := probeArena(t, 0o1777)
	os.Mkdir(filepath.Join(victim, "mnt"), 0o755)
	asNobody(t, "ln", "-s", victim, filepath.Join(play, "agent"))
	created := false
	beforeCanaryUnlink = func(string, string) { created = true }
	t.Cleanup(func() { beforeCanaryUnlink = nil })
	r := probe(filepath.Join(play, "agent", "mnt"), true)
	if r.OK || r.Op != "opendir" || r.Errno != "ELOOP" || !strings.Contains(r.Error, "symlink") {
		t.Errorf("probe through a symlinked parent: %+v, want a refusal (opendir, ELOOP) naming the symlink", r)
	}
	if created {
		t.Error("the probe created its canary through the symlinked parent")
	}
	if ents, _ := os.ReadDir(filepath.Join(victim, "mnt")); len(ents) != 0 {
		t.Errorf("left in the victim's directory: %v", ents)
	}
}

// The mount's parent lies in a world-writable directory without the sticky bit, so
// uid 65534 can rename it: between the canary's create and its unlink the attacker moves
// the parent away and puts a symlink to the victim's directory in its place, where root
// has a file of the canary's very name. The unlink happens beneath the mount root's fd, in
// the directory the canary was made in: the victim's file stays, the canary is gone.
func TestProbeCanaryUnlinkAfterASwappedParent(t *testing.T) {
	play, victim := probeArena(t, 0o777)
	parent := filepath.Join(play, "agent")
	os.MkdirAll(filepath.Join(parent, "mnt"), 0o755)
	os.Mkdir(filepath.Join(victim, "mnt"), 0o755)
	moved := filepath.Join(play, "moved")
	var canary string
	beforeCanaryUnlink = func(root, name string) {
		canary = name
		os.WriteFile(filepath.Join(victim, "mnt", name), []byte("root's own file\n"), 0o644)
		asNobody(t, "mv", parent, moved)
		asNobody(t, "ln", "-s", victim, parent)
	}
	t.Cleanup(func() { beforeCanaryUnlink = nil })
	r := probe(filepath.Join(parent, "mnt"), true)
	if canary == "" {
		t.Fatalf("the probe made no canary: %+v", r)
	}
	if !r.OK {
		t.Errorf("probe: %+v, want healthy: the canary it made was removed where it made it", r)
	}
	if b, err := os.ReadFile(filepath.Join(victim, "mnt", canary)); err != nil || string(b) != "root's own file\n" {
		t.Errorf("the victim's file of the canary's name: %q %v; the unlink went through the swapped parent", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(moved, "mnt")); len(ents) != 0 {
		t.Errorf("the canary was left in the directory it was made in: %v", ents)
	}
}

// A canary replaced by another file before the unlink (someone who may write the mount
// root renamed theirs over it) is left alone, and the probe says so. (An inode number
// freed and reused at once could pass for the canary; holding the canary open across the
// unlink would prevent that but makes FUSE filesystems without hard_remove hide the file
// as .fuse_hidden*: the identity check is the best a probe can do there.)
func TestProbeCanaryReplacedIsLeftAlone(t *testing.T) {
	dir := t.TempDir()
	beforeCanaryUnlink = func(root, name string) {
		theirs := filepath.Join(root, "theirs")
		os.WriteFile(theirs, []byte("theirs\n"), 0o644)
		os.Rename(theirs, filepath.Join(root, name)) // renamed over the canary
	}
	t.Cleanup(func() { beforeCanaryUnlink = nil })
	r := probe(dir, true)
	if r.OK || r.Op != "unlink" || !strings.Contains(r.Error, "replaced") {
		t.Errorf("probe: %+v, want an unlink failure saying the canary was replaced", r)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("entries %v, want the replacement only", ents)
	}
}
