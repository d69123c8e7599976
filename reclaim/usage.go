package reclaim

import (
	"context"
	"path/filepath"
	"sort"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// usageTop is how many directories a replace verdict lists.
const usageTop = 10

// usageDepth is how deep directories are reported (their totals include everything below).
const usageDepth = 4

// usage finds the largest directories of a filesystem within UsageBudget, walking beneath
// its mount point with safefs: never crossing a mount, never following a symlink, counting
// a hard-linked inode once. A person reads it before the sandbox is replaced.
func (r *Reclaimer) usage(ctx context.Context, m api.Filesystem) []api.Usage {
	top := m.Mountpoint
	if top == "" {
		top = m.Path
	}
	root, err := safefs.OpenRoot(top)
	if err != nil {
		return nil
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(ctx, r.opts.UsageBudget)
	defer cancel()
	u := &usageWalk{ctx: ctx, root: root, seen: map[uint64]bool{}, totals: map[string]*api.Usage{}}
	u.walk("", 0)
	list := make([]api.Usage, 0, len(u.totals))
	for _, t := range u.totals {
		list = append(list, *t)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Bytes != list[j].Bytes {
			return list[i].Bytes > list[j].Bytes
		}
		return len(list[i].Path) > len(list[j].Path) // the deeper of equals names the culprit
	})
	return list[:min(len(list), usageTop)]
}

type usageWalk struct {
	ctx    context.Context
	root   *safefs.Root
	seen   map[uint64]bool
	totals map[string]*api.Usage
	n      int
}

// walk returns the bytes and files beneath dir and records directories down to usageDepth.
func (u *usageWalk) walk(dir string, depth int) (int64, int64) {
	if u.n++; u.n%64 == 0 && u.ctx.Err() != nil {
		return 0, 0
	}
	es, err := u.root.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	var b, f int64
	for _, e := range es {
		if e.Dev != u.root.Dev() {
			continue
		}
		name := join(dir, e.Name)
		if e.IsDir() {
			cb, cf := u.walk(name, depth+1)
			b, f = b+cb, f+cf+1
			continue
		}
		f++
		if e.Nlink > 1 {
			if u.seen[e.Ino] {
				continue
			}
			u.seen[e.Ino] = true
		}
		b += e.Blocks * 512
	}
	if dir != "" && depth <= usageDepth {
		u.totals[dir] = &api.Usage{Path: filepath.Join(u.root.Path(), dir), Bytes: b, Files: f}
	}
	return b, f
}
