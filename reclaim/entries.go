package reclaim

import (
	"context"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

// trashPrefix names the trash of a cache: a directory entry is renamed to
// <root>/.sandboxd-trash.<seq> (one atomic rename, no new inode, so it works at 0 free
// inodes) and deleted from there; a restart finds leftovers by the prefix and empties them.
const trashPrefix = ".sandboxd-trash."

// maxListDepth bounds the "**" walk of an entry pattern.
const maxListDepth = 12

// entry is one deletable unit of a cache.
type entry struct {
	cache *cache
	name  string // relative to the cache root
	dir   bool
	age   time.Time // the newer of atime and mtime
	bytes int64     // estimate: st_blocks*512 of single-link files
	files int64     // estimate: inodes freed
	sized bool
}

// lister enumerates a cache's entries under its kind's patterns; it never follows a
// symlink (a symlink is an entry of its own) and skips anything holding a mount point.
type lister struct {
	ctx    context.Context
	root   *safefs.Root
	c      *cache
	mounts []string // mount points beneath the root, relative to it
	walks  *int64   // counts directory reads, so tests can prove a healthy run reads none
	out    []entry
}

func (l *lister) list() []entry {
	for _, p := range l.c.kind.patterns {
		l.match("", strings.Split(p, "/"), 0)
	}
	if l.c.kind.modDirs {
		l.modDirs("", 0)
	}
	return l.out
}

func (l *lister) readDir(dir string) []safefs.Entry {
	if l.ctx.Err() != nil {
		return nil
	}
	*l.walks++
	es, err := l.root.ReadDir(dir)
	if err != nil {
		return nil
	}
	return es
}

// match walks dir along the remaining pattern segments.
func (l *lister) match(dir string, segs []string, depth int) {
	if len(segs) == 0 || depth > maxListDepth {
		return
	}
	seg := segs[0]
	for _, e := range l.readDir(dir) {
		name := join(dir, e.Name)
		if (dir == "" && isTrash(e.Name)) || l.holdsMount(name) || e.Dev != l.root.Dev() {
			continue
		}
		if seg == "**" {
			if e.IsDir() {
				l.match(name, segs, depth+1)
			} else {
				l.add(name, e)
			}
			continue
		}
		if ok, _ := path.Match(seg, e.Name); !ok {
			continue
		}
		switch {
		case len(segs) > 1:
			if e.IsDir() {
				l.match(name, segs[1:], depth+1)
			}
		case l.c.kind.filesOnly && e.IsDir():
		default:
			l.add(name, e)
		}
	}
}

// modDirs finds the Go module cache's <module>@<version> directories outside cache/.
func (l *lister) modDirs(dir string, depth int) {
	if depth > maxListDepth {
		return
	}
	for _, e := range l.readDir(dir) {
		name := join(dir, e.Name)
		if !e.IsDir() || (dir == "" && (e.Name == "cache" || isTrash(e.Name))) || l.holdsMount(name) || e.Dev != l.root.Dev() {
			continue
		}
		if strings.Contains(e.Name, "@") {
			l.add(name, e)
			continue
		}
		l.modDirs(name, depth+1)
	}
}

func (l *lister) add(name string, e safefs.Entry) {
	en := entry{cache: l.c, name: name, dir: e.IsDir(), age: e.Mtime}
	if e.Atime.After(en.age) {
		en.age = e.Atime
	}
	if !en.dir {
		en.sized = true
		if e.Nlink == 1 {
			en.bytes = e.Blocks * 512
			en.files = 1
		}
	}
	l.out = append(l.out, en)
}

// holdsMount reports whether name is a mount point or has one beneath it.
func (l *lister) holdsMount(name string) bool {
	for _, m := range l.mounts {
		if within(m, name) {
			return true
		}
	}
	return false
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// sizeEntry fills a directory entry's estimate with a budgeted walk.
func sizeEntry(ctx context.Context, root *safefs.Root, e *entry, budget int64, walks *int64) {
	if e.sized {
		return
	}
	*walks++
	u, err := root.Size(ctx, e.name, budget)
	e.sized = true
	if err != nil {
		return
	}
	e.bytes = u.Bytes
	e.files = u.Files + u.Dirs
}

// mountsUnder lists the mount points strictly beneath root, relative to it.
func mountsUnder(all []string, root string) []string {
	var out []string
	for _, m := range all {
		if m != root && within(m, root) {
			out = append(out, strings.TrimPrefix(m, strings.TrimSuffix(root, "/")+"/"))
		}
	}
	return out
}

// statDev is the st_dev of path (0 when it cannot be read).
func statDev(p string) uint64 {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return 0
	}
	return uint64(st.Dev)
}

func isTrash(name string) bool { return strings.HasPrefix(name, trashPrefix) }
