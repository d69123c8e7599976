package config

import (
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// SiteGuards are the directories a site root must keep clear of, by identity: it may not
// be, contain or lie inside a protected path or the state dir, and where it really is
// (through a bind mount) may not be a system directory or inside one (dangerousRoot).
func (c *Config) SiteGuards() []safefs.Guarded { return c.guards(true) }

// CacheGuards are the same for cache roots, except that a cache may lie inside a
// protected path (CONTRACT §6.3: a protected path is never touched "unless it lies inside
// a cache root"; discovered caches live in /home/*), plus the site roots, which a cache
// may not be, contain or lie inside.
func (c *Config) CacheGuards() []safefs.Guarded { return c.guards(false) }

func (c *Config) guards(site bool) []safefs.Guarded {
	gs := []safefs.Guarded{{System: true, What: "the system directories"}}
	for i, p := range c.Reclaim.Protect {
		if path.IsAbs(p) {
			gs = append(gs, safefs.Guarded{Path: path.Clean(p), Inside: site,
				What: fmt.Sprintf("the protected path %s (reclaim.protect[%d])", p, i)})
		}
	}
	if path.IsAbs(c.Server.StateDir) {
		gs = append(gs, safefs.Guarded{Path: path.Clean(c.Server.StateDir), Inside: true,
			What: fmt.Sprintf("the state directory %s (server.state_dir)", c.Server.StateDir)})
	}
	if !site {
		// A cache that is, contains or lies inside a site: its wipe would delete a running
		// job's files, which retention keeps. The cache is refused; the site goes on.
		for i, st := range c.Sites {
			if path.IsAbs(st.Path) {
				gs = append(gs, safefs.Guarded{Path: path.Clean(st.Path), Inside: true,
					What: fmt.Sprintf("the site %s (site[%d].path)", st.Path, i)})
			}
		}
	}
	return gs
}

// Check is what `sandboxd config check` runs: Load, and then a look at this machine's
// site and cache roots as the daemon will open them. A root that exists but is reached
// through a symlink or an unsafe ancestor, or that is, contains or (a site) lies inside a
// protected path or the state directory by device and inode, is a problem on the line of
// its path. A root that does not exist yet is fine: the daemon waits for it.
func Check(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, ps, err := decode(data, file)
	if err != nil {
		return nil, err
	}
	validate(c, ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	for i, s := range c.Sites {
		inspectRoot(ps, fmt.Sprintf("site[%d].path", i), s.Path, c.SiteGuards())
	}
	for i, cc := range c.Reclaim.Caches {
		inspectRoot(ps, fmt.Sprintf("reclaim.cache[%d].path", i), cc.Path, c.CacheGuards())
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func inspectRoot(ps *problems, key, p string, guards []safefs.Guarded) {
	r, err := safefs.OpenRoot(p)
	switch {
	case errors.Is(err, safefs.ErrUnsafeRoot):
		ps.addf(key, "%v", err)
		return
	case err != nil:
		return // missing, or not a directory yet: the daemon reports it once it runs
	}
	defer r.Close()
	if why := r.CheckGuards(guards); why != "" {
		ps.addf(key, "%s", why)
	}
}
