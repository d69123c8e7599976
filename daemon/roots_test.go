package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// fingerprintExcept hashes every name, mode, link target and file content under dir,
// skipping the subtrees in skip (the real roots, which may lose files).
func fingerprintExcept(t *testing.T, dir string, skip ...string) string {
	t.Helper()
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(h, "err %s %v\n", p, err)
			return nil
		}
		for _, s := range skip {
			if p == s {
				return filepath.SkipDir
			}
		}
		fi, _ := os.Lstat(p)
		fmt.Fprintf(h, "%s %v\n", p, fi.Mode())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(h, "-> %s\n", target)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestIssue9Reproduction is the attack of issue 9, end to end through the daemon: on a
// 1777 tmpfs uid 65534 links $T/anc2 -> $T and $T/anc3 -> $T/outside/victim; the config
// names a site $T/anc2/home (really the protected $T/home) and a cache $T/anc3/cache
// (really a root-owned tree in no site and no cache). A reclaim to a target only every cache together could meet and a
// launch on the site delete nothing outside the one real cache, and both say why.
func TestIssue9Reproduction(t *testing.T) {
	T := testenv.Tmpfs(t, 24<<20, 0)
	if err := unix.Chmod(T, 0o1777); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	home := filepath.Join(T, "home")
	os.MkdirAll(home, 0o755)
	for i := range 4 { // a launcher's expired jobs: what the drain would delete
		for _, suf := range []string{".pid", ".out", ".status"} {
			p := filepath.Join(home, fmt.Sprintf("job%d%s", i, suf))
			os.WriteFile(p, []byte("99999999\n"), 0o644)
			os.Chtimes(p, old, old)
		}
	}
	for _, d := range []string{"outside/victim/cache/a", "outside/victim/cache/b", "realcache/x", "realcache/y"} {
		p := filepath.Join(T, d)
		os.MkdirAll(p, 0o755)
		testenv.Fill(filepath.Join(p, "blob"), 2<<20)
		os.Chtimes(filepath.Join(p, "blob"), old, old)
		os.Chtimes(p, old, old)
	}
	for _, l := range [][2]string{{T, "anc2"}, {filepath.Join(T, "outside", "victim"), "anc3"}} {
		cmd := exec.Command("ln", "-s", l[0], filepath.Join(T, l[1]))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ln as uid 65534: %v %s", err, out)
		}
	}
	realCache := filepath.Join(T, "realcache")
	before := fingerprintExcept(t, T, realCache)

	td := startDaemon(t, fmt.Sprintf(`[[filesystem]]
path = %[1]q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
[[site]]
name = "s"
path = "%[1]s/anc2/home"
max_age = "1h"
[[reclaim.cache]]
name = "victim"
path = "%[1]s/anc3/cache"
[[reclaim.cache]]
name = "real"
path = %[2]q
`, T, realCache), func(o *Options) {
		o.Config.Reclaim.Protect = append(o.Config.Reclaim.Protect, home)
	})

	status, _, body := td.do(t, "POST", "/v1/reclaim", `{"target_free":"22MiB"}`)
	if status != 200 {
		t.Fatalf("reclaim: %d %s", status, body)
	}
	var run api.ReclaimRun
	json.Unmarshal([]byte(body), &run)
	var victimSkipped, siteSkipped bool
	for _, a := range run.Actions {
		victimSkipped = victimSkipped || a.Source == "victim" && a.Status == api.ActionSkipped && strings.Contains(a.Error, "anc3 is a symlink")
		siteSkipped = siteSkipped || a.Source == "site:s" && a.Status == api.ActionSkipped && strings.Contains(a.Error, "anc2 is a symlink")
	}
	if !victimSkipped || !siteSkipped {
		t.Errorf("reclaim actions do not say the roots were refused: %s", body)
	}
	if _, err := os.Stat(filepath.Join(realCache, "x")); err == nil {
		t.Errorf("the real cache was not emptied: %s", body)
	}

	status, _, body = td.do(t, "POST", "/v1/launch", `{"site":"s","need_bytes":"1KiB"}`)
	var lr api.LaunchResponse
	json.Unmarshal([]byte(body), &lr)
	if status != 200 || len(lr.Warnings) == 0 || !strings.Contains(strings.Join(lr.Warnings, "\n"), "site s is not cleaned: root "+filepath.Join(T, "anc2", "home")) {
		t.Errorf("launch: %d %s; want 200 with the site's problem in warnings", status, body)
	}
	if fingerprintExcept(t, T, realCache) != before {
		t.Fatal("a file outside the real cache changed: the attack worked")
	}
}

// A reload that adds a protected path reaches the sites and caches whose [[site]] and
// [[reclaim.cache]] entries did not change: the site inside it (by identity: the new
// path is a symlinked alias) stops being cleaned, the cache containing it is skipped.
func TestReloadedProtectReachesUnchangedRoots(t *testing.T) {
	T := testenv.Tmpfs(t, 24<<20, 0)
	old := time.Now().Add(-48 * time.Hour)
	os.MkdirAll(filepath.Join(T, "data", "site"), 0o755)
	for _, d := range []string{"cache/keep", "cache/x"} {
		p := filepath.Join(T, d)
		os.MkdirAll(p, 0o755)
		testenv.Fill(filepath.Join(p, "blob"), 1<<20)
		os.Chtimes(filepath.Join(p, "blob"), old, old)
		os.Chtimes(p, old, old)
	}
	os.Symlink(filepath.Join(T, "data"), filepath.Join(T, "alias"))
	os.Symlink(filepath.Join(T, "cache", "keep"), filepath.Join(T, "alias2"))
	td := startDaemon(t, fmt.Sprintf(`[[filesystem]]
path = %[1]q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
[[site]]
name = "s"
path = "%[1]s/data/site"
[[reclaim.cache]]
name = "c"
path = "%[1]s/cache"
`, T))
	site := func() string {
		st, err := td.client.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Sites {
			if s.Name == "s" && s.Problem != nil {
				return *s.Problem
			}
		}
		return ""
	}
	// Ready is not scanned: the site's first scan runs beside the daemon's start.
	poll(t, time.Minute, "the site's first scan", func() bool { return site() != "not scanned yet" })
	if p := site(); p != "" {
		t.Fatalf("site problem before the reload: %q", p)
	}
	cfgPath := filepath.Join(td.dir, "sandboxd.toml")
	b, _ := os.ReadFile(cfgPath)
	next := strings.Replace(string(b), `protect = ["/home", "/root"]`,
		fmt.Sprintf(`protect = ["/home", "/root", "%[1]s/alias", "%[1]s/alias2"]`, T), 1)
	if next == string(b) {
		t.Fatal("the test config has no protect line to extend")
	}
	os.WriteFile(cfgPath, []byte(next), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	poll(t, time.Minute, "the site to see the new protected path", func() bool {
		return strings.Contains(site(), "lies inside the protected path "+filepath.Join(T, "alias"))
	})
	before := fingerprintExcept(t, filepath.Join(T, "cache"))
	status, _, body := td.do(t, "POST", "/v1/reclaim", `{"target_free":"23MiB"}`)
	if status != 200 || !strings.Contains(body, "contains the protected path "+filepath.Join(T, "alias2")) {
		t.Errorf("reclaim after the reload: %d %s; want the cache skipped", status, body)
	}
	if fingerprintExcept(t, filepath.Join(T, "cache")) != before {
		t.Error("the cache holding the new protected path lost files")
	}
}
