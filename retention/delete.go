package retention

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// deleteJob removes one job's entries through the site root's open Dir, the pid file
// last, so a job cut short still shows whose it was. A trusted pick costs one unlinkat per
// plain file (its directories are stated again and removed by the tree walk). Otherwise each entry is verified first, one statx each (the age recheck, which
// also gives the type and the bytes freed); directories go first (a tree with a newer file
// inside is kept, and then nothing else of the job goes), and if an entry became younger
// than the cutoff, nothing is removed.
//
// ents is scratch space for the job's entries (any length, reused); deleteJob returns it,
// grown if it had to be, for the next job.
func (s *site) deleteJob(ctx context.Context, root *safefs.Root, d *safefs.Dir, p *pick, ents []safefs.Entry) []safefs.Entry {
	dev := root.Dev()
	ents = slices.Grow(ents[:0], len(p.ents))
	// A mount point is never removed, and it is an error of the job: the job is left
	// alone until the next rescan (finish marks it failed). Skipped silently, it stayed
	// expired in the index, and the drain claimed it again in every batch, ~10,000 a
	// second, for as long as the mount stayed (found by TestTrustedPickRechecksItsDirectory
	// draining its site to the end).
	var mountPoint string
	defer func() {
		if mountPoint != "" && p.err == nil {
			p.err = fmt.Errorf("prune %s/%s: left in place: a mount point", d.Path(), mountPoint)
		}
	}()
	if p.trusted {
		for _, e := range p.ents {
			if e.isDir() {
				// Stated again, as an untrusted entry is: the age recheck of the
				// directory itself; the tree walk checks what is inside.
				de, err := d.Lstat(e.name)
				if err != nil {
					p.gone = append(p.gone, e.name)
					continue
				}
				if de.Dev != dev || de.MountRoot {
					mountPoint = e.name // never removed
					continue
				}
				if de.Mtime.UnixNano() >= p.cutoff {
					p.ups = statNames(root.Fd(), dev, p.names())
					return ents
				}
				ents = append(ents, de)
				continue
			}
			ents = append(ents, safefs.Entry{
				Name: e.name, Type: uint32(e.typ) << 12, Size: e.size, Ino: e.ino, Dev: dev,
				Mtime: timeFromNanos(e.mtime), Nlink: 1, Blocks: int64(e.blocks),
			})
		}
	} else {
		for _, n := range p.names() {
			e, err := d.Lstat(n)
			if err != nil {
				p.gone = append(p.gone, n)
				continue // gone already
			}
			if e.Dev != dev || e.MountRoot {
				mountPoint = n // never removed
				continue
			}
			if e.Mtime.UnixNano() >= p.cutoff {
				p.ups = statNames(root.Fd(), dev, p.names())
				return ents
			}
			ents = append(ents, e)
		}
	}
	rank := func(e safefs.Entry) int {
		switch {
		case e.IsDir():
			return 0 // what OnlyOlderThan may keep, so before anything else goes
		case isPidFile(e.Name):
			return 2
		}
		return 1
	}
	slices.SortStableFunc(ents, func(a, b safefs.Entry) int { return rank(a) - rank(b) })
	opts := safefs.RemoveOptions{MakeWritable: true}
	if p.cutoff != math.MinInt64 {
		opts.OnlyOlderThan = timeFromNanos(p.cutoff)
	}
	p.removed = slices.Grow(p.removed, len(ents))
	for _, e := range ents {
		st, err := d.RemoveEntry(ctx, e, opts)
		p.freed += st.Bytes
		switch {
		case st.Files+st.Dirs > 0 && st.Skipped == 0 && err == nil:
			p.removed = append(p.removed, e.Name)
			continue
		case st.Files+st.Dirs+st.Skipped == 0 && err == nil:
			p.gone = append(p.gone, e.Name) // unlinked by someone else meanwhile
			continue
		}
		if err == nil {
			err = fmt.Errorf("prune %s/%s: left in place (newer, or a mount point beneath)", d.Path(), e.Name)
		}
		if st.Files+st.Dirs > 0 {
			p.removed = append(p.removed, e.Name) // partly: the index rescans what is left
		}
		p.err = err
		if len(p.removed) == 0 {
			return ents // nothing of the job is gone yet: keep it whole
		}
	}
	return ents
}

// names lists the pick's entry names.
func (p *pick) names() []string {
	out := make([]string, len(p.ents))
	for i := range p.ents {
		out[i] = p.ents[i].name
	}
	return out
}
