package reclaim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// env is a small real filesystem with a home, caches and a site.
type env struct {
	t        *testing.T
	root     string // the tmpfs
	home     string
	stateDir string
	// thresholds the fake pressure watcher reports
	reclaimBelow, replaceBelow uint64
	reclaimInodes, replaceInod uint64
	mu                         sync.Mutex
	replaced                   []string
	events                     []api.Event
	measures                   int
}

func newEnv(t *testing.T, size int64, inodes int) *env {
	t.Helper()
	root := testenv.Tmpfs(t, size, inodes)
	e := &env{t: t, root: root, home: filepath.Join(root, "home", "u"), stateDir: t.TempDir(),
		reclaimBelow: 64 * mib, replaceBelow: 16 * mib}
	mustMkdir(t, e.home)
	return e
}

func mustMkdir(t testing.TB, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// measure is a real statfs with the env's thresholds, as the daemon's Measure would give.
func (e *env) measure(ctx context.Context, p string) (api.Filesystem, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return api.Filesystem{}, err
	}
	e.mu.Lock()
	e.measures++
	e.mu.Unlock()
	fr := uint64(st.Frsize)
	m := api.Filesystem{Path: p, Mountpoint: e.root, FSType: "tmpfs",
		SizeBytes: st.Blocks * fr, AvailBytes: st.Bavail * fr, FreeBytes: st.Bfree * fr,
		Files: st.Files, FilesFree: st.Ffree,
		ReclaimThresholdBytes: e.reclaimBelow, ReplaceThresholdBytes: e.replaceBelow,
		ReclaimThresholdFiles: e.reclaimInodes, ReplaceThresholdFiles: e.replaceInod, SampledAt: time.Now()}
	if m.SizeBytes > 0 {
		m.UsedRatio = 1 - float64(m.AvailBytes)/float64(m.SizeBytes)
	}
	return m, nil
}

func (e *env) options() Options {
	return Options{
		AutoCaches: []string{"pnpm", "npm", "yarn", "pip", "uv", "go-build", "go-mod", "cargo", "apt"},
		Protect:    []string{filepath.Join(e.root, "home")},
		MinAge:     2 * time.Minute, Headroom: 16 * mib, Cooldown: 10 * time.Minute,
		Filesystems:    []string{e.root},
		HomeRoots:      []string{filepath.Join(e.root, "home", "*")},
		AptArchives:    filepath.Join(e.root, "apt-archives"),
		DpkgLock:       filepath.Join(e.root, "dpkg-lock-frontend"),
		Measure:        e.measure,
		MarkReplace:    func(fs, why string) { e.mu.Lock(); e.replaced = append(e.replaced, fs+": "+why); e.mu.Unlock() },
		State:          state.Open(e.stateDir),
		Events:         func(ev api.Event) { e.mu.Lock(); e.events = append(e.events, ev); e.mu.Unlock() },
		LookPath:       noTools,
		CommandTimeout: 5 * time.Second,
	}
}

func (e *env) newReclaimer(o Options) *Reclaimer {
	e.t.Helper()
	r, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func noTools(name string) (string, error) { return "", fmt.Errorf("%s: not allowed in tests", name) }

// onlyTools allows the named tools (absolute scripts pass through).
func onlyTools(names ...string) func(string) (string, error) {
	return func(n string) (string, error) {
		if filepath.IsAbs(n) {
			return n, nil
		}
		for _, a := range names {
			if a == n {
				return "/usr/local/go/bin/" + n, nil
			}
		}
		return noTools(n)
	}
}

// writeFile writes n bytes at p with mtime and atime set to age ago.
func writeFile(t testing.TB, p string, n int, age time.Duration) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + len(p))
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-age)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

// goBuildCache makes a go-build-like cache: files in 2-hex subdirs.
func goBuildCache(t testing.TB, dir string, files, size int, age time.Duration) {
	for i := 0; i < files; i++ {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("%02x", i%256), fmt.Sprintf("%064x-d", i)), size, age+time.Duration(i)*time.Second)
	}
}

// npmCache makes an npm _cacache: content files and index buckets.
func npmCache(t testing.TB, dir string, files, size int, age time.Duration) {
	for i := 0; i < files; i++ {
		writeFile(t, filepath.Join(dir, "content-v2", "sha512", fmt.Sprintf("%02x", i%256), fmt.Sprintf("%02x", i/256), fmt.Sprintf("%060x", i)), size, age)
		writeFile(t, filepath.Join(dir, "index-v5", fmt.Sprintf("%02x", i%256), "00", fmt.Sprintf("%060x", i)), 200, age)
	}
}

// pipCache makes pip http cache files.
func pipCache(t testing.TB, dir string, files, size int, age time.Duration) {
	for i := 0; i < files; i++ {
		writeFile(t, filepath.Join(dir, "http-v2", "a", "b", "c", fmt.Sprintf("%d", i%7), fmt.Sprintf("%040x", i)), size, age)
	}
}

// hashTree returns path → sha256 of every regular file under dir (symlinks by target).
// It skips cache directories (.cache, .npm, go, .cargo, .pnpm-store, .local/share/pnpm):
// reading a cache file would refresh its atime and make it young.
func hashTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		switch {
		case d.IsDir() && p != dir && cacheDirNames[d.Name()]:
			return filepath.SkipDir
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[p] = "link:" + l
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			io.Copy(h, f)
			f.Close()
			out[p] = hex.EncodeToString(h.Sum(nil))
		}
		return nil
	})
	return out
}

var cacheDirNames = map[string]bool{".cache": true, ".npm": true, "go": true, ".cargo": true, ".pnpm-store": true, "pnpm": true, "declared": true, "site": true}

func sameTree(t testing.TB, before, after map[string]string) {
	t.Helper()
	for p, h := range before {
		if after[p] != h {
			t.Errorf("user file %s changed or vanished (hash %q -> %q)", p, h, after[p])
		}
	}
}

// fillTo writes user data at p until the filesystem has about free bytes left.
func (e *env) fillTo(p string, free uint64) {
	e.t.Helper()
	m, _ := e.measure(context.Background(), e.root)
	if m.AvailBytes <= free {
		return
	}
	if err := testenv.Fill(p, int64(m.AvailBytes-free)); err != nil {
		e.t.Fatalf("fill %s: %v", p, err)
	}
}

func (e *env) avail() uint64 {
	m, _ := e.measure(context.Background(), e.root)
	return m.AvailBytes
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
