package reclaim

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

// cache is one cache root the ladder may work on.
type cache struct {
	CacheConfig
	kind *kind  // layout and tool commands
	home string // HOME for its commands
}

// source is the metrics label of a cache: its kind, or its declared name.
func (c *cache) source() string {
	if c.kind != declaredKind {
		return c.kind.name
	}
	return c.Name
}

// Source is the name the cache's freed bytes and files are counted under: the kind for
// an auto cache (all pnpm stores count as "pnpm"), the name for a declared one.
func (ci CacheInfo) Source() string {
	if ci.Kind != declaredKind.name {
		return ci.Kind
	}
	return ci.Name
}

// CacheInfo is a cache root as status shows it.
type CacheInfo struct {
	Name           string    `json:"name"`
	Kind           string    `json:"kind"`
	Path           string    `json:"path"`
	Declared       bool      `json:"declared"`
	Owner          uint32    `json:"owner_uid"`
	Ladder         string    `json:"ladder"`
	Order          int       `json:"order"`
	EstimatedBytes int64     `json:"estimated_bytes"`
	EstimatedFiles int64     `json:"estimated_files"`
	Partial        bool      `json:"partial,omitempty"`
	SizedAt        time.Time `json:"sized_at,omitzero"`
	Problem        string    `json:"problem,omitempty"`
}

// Caches lists the declared and discovered cache roots of the last discovery, with the
// sizes of the last background sizing.
func (r *Reclaimer) Caches() []CacheInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.caches)
}

// discover returns the declared caches and the auto caches found under the home roots.
// It looks at a handful of paths per home (lstat beneath the home, no symlinks) and walks
// nothing.
func (r *Reclaimer) discover() []*cache {
	var out []*cache
	for _, c := range r.opts.Caches {
		k := declaredKind
		if c.Kind != "" {
			k = kindByName(c.Kind)
		}
		cc := &cache{CacheConfig: c, kind: k, home: c.Path}
		if cc.Ladder == "" {
			cc.Ladder = LadderAll
		}
		out = append(out, cc)
	}
	want := map[string]bool{}
	for _, k := range r.opts.AutoCaches {
		want[k] = true
		if k == "cargo" {
			want["cargo-src"] = true
		}
	}
	var homes []string
	for _, pat := range r.opts.HomeRoots {
		m, err := filepath.Glob(pat)
		if err != nil {
			continue
		}
		homes = append(homes, m...)
	}
	sort.Strings(homes)
	for _, home := range homes {
		hr, err := safefs.OpenRoot(home)
		if err != nil {
			continue // a home that is a symlink or gone is not a place to find caches
		}
		for _, k := range kinds {
			if !want[k.name] || len(k.roots) == 0 {
				continue
			}
			for _, rel := range k.roots {
				e, err := hr.Lstat(rel)
				if err != nil || !e.IsDir() {
					continue
				}
				out = append(out, &cache{
					CacheConfig: CacheConfig{Name: k.name + ":" + home, Path: filepath.Join(home, rel), Ladder: LadderAll, Order: 100},
					kind:        k, home: home,
				})
			}
		}
		hr.Close()
	}
	if want["apt"] {
		var st unix.Stat_t
		if err := unix.Lstat(r.opts.AptArchives, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, &cache{
				CacheConfig: CacheConfig{Name: "apt", Path: r.opts.AptArchives, Ladder: LadderAll, Order: 100},
				kind:        kindByName("apt"), home: "/root",
			})
		}
	}
	out = uniqueRoots(out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Order < out[j].Order })
	r.publishCaches(out)
	return out
}

// publishCaches records a discovery for status, keeping known sizes. Each root is opened
// the way the ladder will open it, so a refused one shows its reason.
func (r *Reclaimer) publishCaches(cs []*cache) {
	type seen struct {
		owner   uint32
		problem string
	}
	look := make([]seen, len(cs))
	for i, c := range cs {
		if p := r.unsafeRoot(c.Path); p != "" {
			look[i].problem = p
			continue
		}
		root, err := r.openCache(c)
		switch {
		case err == nil:
			look[i].owner = root.UID()
			root.Close()
		case errors.Is(err, errRefused):
			look[i].problem = err.Error()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := map[string]CacheInfo{}
	for _, ci := range r.caches {
		old[ci.Path] = ci
	}
	infos := make([]CacheInfo, 0, len(cs))
	for i, c := range cs {
		ci := CacheInfo{Name: c.Name, Kind: c.kind.name, Path: c.Path, Declared: c.kind == declaredKind || slices.ContainsFunc(r.opts.Caches, func(d CacheConfig) bool { return d.Path == c.Path }),
			Ladder: c.Ladder, Order: c.Order, Owner: look[i].owner, Problem: look[i].problem}
		if o, ok := old[c.Path]; ok {
			ci.EstimatedBytes, ci.EstimatedFiles, ci.Partial, ci.SizedAt = o.EstimatedBytes, o.EstimatedFiles, o.Partial, o.SizedAt
		}
		infos = append(infos, ci)
	}
	r.caches = infos
}

// unsafeRoot says why a cache root must not be touched ("" when it may): a protected path
// or an ancestor of one.
func (r *Reclaimer) unsafeRoot(path string) string {
	for _, p := range r.opts.Protect {
		if within(p, path) {
			return fmt.Sprintf("cache root %s is or contains the protected path %s", path, p)
		}
	}
	if path == "/" {
		return "cache root is /"
	}
	return ""
}

// within reports whether path is dir or lies beneath it (lexically, both cleaned).
func within(path, dir string) bool {
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// errRefused marks a cache root that exists but must not be worked on: reached through a
// symlink or an unsafe ancestor, or overlapping a guarded directory by identity.
var errRefused = errors.New("refused")

// refusedError is a refusal whose message is its reason alone.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return errRefused }

// openCache opens a cache root with safefs's walk from "/" (no symlink in any component, no
// ancestor another user could change) and refuses one that is or contains a protected
// path or the state dir by device and inode (Options.Guards), located afresh on every
// open. The caller closes it.
func (r *Reclaimer) openCache(c *cache) (*safefs.Root, error) {
	root, err := safefs.OpenRoot(c.Path)
	var ue *safefs.UnsafeRootError
	switch {
	case errors.As(err, &ue):
		return nil, &refusedError{"cache " + ue.Error()}
	case err != nil:
		return nil, err
	}
	if why := root.CheckGuards(r.opts.Guards); why != "" {
		root.Close()
		return nil, &refusedError{"cache " + why}
	}
	return root, nil
}

// uniqueRoots keeps the first cache of each root path: a declared root that is also a
// discovered one (or a home matched by two globs) is one cache, listed and walked once.
func uniqueRoots(cs []*cache) []*cache {
	seen := map[string]bool{}
	out := cs[:0]
	for _, c := range cs {
		p := filepath.Clean(c.Path)
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, c)
	}
	return out
}
