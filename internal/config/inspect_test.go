package config

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// `config check` on the reproduction of issue 9: another user's symlinks in a parent
// directory of a site and of a cache, and a protected path reached through an alias.
func TestCheckSeesUnsafeRootsOnDisk(t *testing.T) {
	T := testenv.Tmpfs(t, 1<<20, 0)
	if err := unix.Chmod(T, 0o1777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"home/work", "outside/victim/cache", "state/sandboxd", "ok/site"} {
		os.MkdirAll(filepath.Join(T, d), 0o755)
	}
	for _, args := range [][]string{{T, "anc2"}, {filepath.Join(T, "outside", "victim"), "anc3"}} {
		cmd := exec.Command("ln", "-s", args[0], filepath.Join(T, args[1]))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ln as uid 65534: %v %s", err, out)
		}
	}
	// Root's own aliases: the text of the site and the cache is clear of them.
	os.Symlink(filepath.Join(T, "home"), filepath.Join(T, "plink"))
	os.Symlink(filepath.Join(T, "state"), filepath.Join(T, "slink"))
	// A bind mount of a site's root: a cache there would wipe the site's running jobs.
	os.Mkdir(filepath.Join(T, "bindsite"), 0o755)
	if err := unix.Mount(filepath.Join(T, "ok", "site"), filepath.Join(T, "bindsite"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(T, "bindsite"), unix.MNT_DETACH) })
	src := fmt.Sprintf(`version = 1
[server]
state_dir = "%[1]s/slink/sandboxd"
[reclaim]
protect = ["%[1]s/plink"]
[[site]]
name = "attacked"
path = "%[1]s/anc2/home"
[[site]]
name = "aliased"
path = "%[1]s/home/work"
[[site]]
name = "fine"
path = "%[1]s/ok/site"
[[site]]
name = "later"
path = "%[1]s/not/yet"
[[reclaim.cache]]
name = "victim"
path = "%[1]s/anc3/cache"
[[reclaim.cache]]
name = "state"
path = "%[1]s/state"
[[reclaim.cache]]
name = "sitealias"
path = "%[1]s/bindsite"
`, T)
	file := filepath.Join(t.TempDir(), "sandboxd.toml")
	os.WriteFile(file, []byte(src), 0o644)
	if _, err := Load(file); err != nil {
		t.Fatalf("Load (text only) = %v; the text of these paths is harmless", err)
	}
	_, err := Check(file)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Check = %v, want problems", err)
	}
	want := map[string][]string{
		"site[0].path":          {"anc2 is a symlink"},
		"site[1].path":          {"lies inside the protected path", "reclaim.protect[0]"},
		"reclaim.cache[0].path": {"anc3 is a symlink"},
		"reclaim.cache[1].path": {"contains the state directory"},
		"reclaim.cache[2].path": {"is the site", "site[2].path"},
	}
	got := map[string]Problem{}
	for _, p := range ve.Problems {
		got[p.Key] = p
	}
	for key, subs := range want {
		p, ok := got[key]
		if !ok {
			t.Errorf("no problem for %s in:\n%v", key, err)
			continue
		}
		line := lineOf(t, src, fmt.Sprintf("name = %q", map[string]string{"site[0].path": "attacked", "site[1].path": "aliased",
			"reclaim.cache[0].path": "victim", "reclaim.cache[1].path": "state", "reclaim.cache[2].path": "sitealias"}[key])) + 1
		if p.Line != line {
			t.Errorf("%s on line %d, want %d (its path)", key, p.Line, line)
		}
		for _, s := range subs {
			if !strings.Contains(p.Msg, s) {
				t.Errorf("%s: %q lacks %q", key, p.Msg, s)
			}
		}
	}
	if len(ve.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(ve.Problems), len(want), err)
	}
}
