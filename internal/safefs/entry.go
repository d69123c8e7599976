package safefs

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Entry is one directory entry as lstat sees it (never following a symlink).
type Entry struct {
	Name   string // raw bytes: newlines and invalid UTF-8 are kept as they are
	Type   uint32 // S_IFMT bits
	Size   int64
	Blocks int64
	Nlink  uint64
	Ino    uint64
	Dev    uint64
	Mtime  time.Time
	Atime  time.Time
	Uid    uint32
	// MountRoot: statx says the entry is the root of a mount (a bind-mounted file or
	// directory of the same device, which Dev alone would not show). Linux >= 5.8.
	MountRoot bool
}

// IsDir reports whether the entry is a directory.
func (e Entry) IsDir() bool { return e.Type == unix.S_IFDIR }

func entryFrom(name string, stx *unix.Statx_t) Entry {
	return Entry{
		Name:   name,
		Type:   uint32(stx.Mode) & unix.S_IFMT,
		Size:   int64(stx.Size),
		Blocks: int64(stx.Blocks),
		Nlink:  uint64(stx.Nlink),
		Ino:    stx.Ino,
		Dev:    stxDev(stx),
		Mtime:  stxTime(stx.Mtime),
		Atime:  stxTime(stx.Atime),
		Uid:    stx.Uid,

		MountRoot: isMountRoot(stx),
	}
}

// ReadDir lists the direct children of dir ("" or "." = the root) with lstat figures, in
// getdents order. An entry that vanishes between listing and stat is left out.
func (r *Root) ReadDir(dir string) ([]Entry, error) {
	rel, err := cleanName(dir)
	if err != nil {
		return nil, fmt.Errorf("read dir: %w", err)
	}
	fd, err := r.openDir(rel)
	if err != nil {
		return nil, fmt.Errorf("read dir %s: open: %w", r.display(rel), err)
	}
	defer unix.Close(fd)
	var out []Entry
	var stx unix.Statx_t
	err = eachName(fd, func(name []byte) error {
		if err := statxAt(fd, &name[0], statxFlags, &stx); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil // gone between listing and stat
			}
			return fmt.Errorf("statx %q: %w", name[:len(name)-1], err)
		}
		out = append(out, entryFrom(string(name[:len(name)-1]), &stx))
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("read dir %s: %w", r.display(rel), err)
	}
	return out, nil
}

// eachName calls f with every name of the open directory fd (NUL-terminated, "." and
// ".." left out by direntIter), reading getdents in batches through a pooled buffer.
func eachName(fd int, f func(name []byte) error) error {
	return eachDirent(fd, func(_ uint64, name []byte) error { return f(name) })
}

// eachDirent is eachName with each entry's inode number.
func eachDirent(fd int, f func(ino uint64, name []byte) error) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("getdents: %w", err)
		}
		if n <= 0 {
			return nil
		}
		it := direntIter{buf: buf[:n]}
		for {
			ino, _, name, ok := it.nextIno()
			if !ok {
				break
			}
			if err := f(ino, name); err != nil {
				return err
			}
		}
	}
}

// Lstat describes name without following it ("" or "." = the root). For a mount point the
// figures are those of the mounted root (Dev differs from the Root's, or IsMountPoint says so).
func (r *Root) Lstat(name string) (Entry, error) {
	rel, err := cleanName(name)
	if err != nil {
		return Entry{}, fmt.Errorf("lstat: %w", err)
	}
	var stx unix.Statx_t
	if rel == "" {
		if err := fstatx(r.fd, &stx); err != nil {
			return Entry{}, fmt.Errorf("lstat %s: %w", r.path, err)
		}
		return entryFrom(".", &stx), nil
	}
	pfd, base, err := r.openParent(rel)
	if err != nil {
		return Entry{}, fmt.Errorf("lstat: %w", err)
	}
	defer unix.Close(pfd)
	if err := unix.Statx(pfd, base, statxFlags, statxMask, &stx); err != nil {
		return Entry{}, fmt.Errorf("lstat %s: %w", r.display(rel), err)
	}
	return entryFrom(base, &stx), nil
}

// ReadNames lists the names of dir's direct children ("" or "." = the root) without
// stating them: getdents only, for a caller that looks for a few names among many (a
// cache's trash among its 20,000 entries) and should not pay a statx for each.
func (r *Root) ReadNames(dir string) ([]string, error) {
	var out []string
	err := r.eachDirentIn(dir, func(_ uint64, name []byte) {
		out = append(out, string(name[:len(name)-1]))
	})
	return out, err
}

// eachDirentIn calls f with every entry of dir ("" or "." = the root) beneath the root,
// opened as every walk opens a directory.
func (r *Root) eachDirentIn(dir string, f func(ino uint64, name []byte)) error {
	rel, err := cleanName(dir)
	if err != nil {
		return fmt.Errorf("read names: %w", err)
	}
	fd, err := r.openDir(rel)
	if err != nil {
		return fmt.Errorf("read names %s: open: %w", r.display(rel), err)
	}
	defer unix.Close(fd)
	if err := eachDirent(fd, func(ino uint64, name []byte) error { f(ino, name); return nil }); err != nil {
		return fmt.Errorf("read names %s: %w", r.display(rel), err)
	}
	return nil
}

// nameArena is the size of the blocks ReadNameInos copies names into: one allocation for
// some thousands of names instead of one each (a listing of 100,000 names spent a third of
// its time in the allocator and the collector), small enough that a block kept alive by a
// few long-lived names costs little. The blocks are never written again once a name is in
// them, so the strings made over them are immutable, as strings must be.
const nameArena = 64 << 10

// NameIno is a directory entry as getdents gives it: its name and inode number.
type NameIno struct {
	Name string
	Ino  uint64
}

// ReadNameInos is ReadNames with each name's inode number (d_ino), which costs no stat:
// a caller can order a big directory's names by inode before it states or unlinks them,
// as gnulib's fts (find, rm) does above 10,000 entries.
func (r *Root) ReadNameInos(dir string) ([]NameIno, error) {
	var out []NameIno
	var arena []byte
	err := r.eachDirentIn(dir, func(ino uint64, name []byte) {
		n := len(name) - 1
		if len(arena)+n > cap(arena) {
			arena = make([]byte, 0, max(nameArena, n))
		}
		arena = append(arena, name[:n]...)
		out = append(out, NameIno{Name: unsafe.String(&arena[len(arena)-n], n), Ino: ino})
	})
	return out, err
}
