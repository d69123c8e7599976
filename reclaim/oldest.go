package reclaim

import "context"

// deleteOldest is rung 3 of a real run: entries (oldest first) are deleted until what
// they freed covers the deficit, then the filesystem is re-measured, and so on.
//
// Sizing a directory entry before deleting it walked every entry twice, which made a
// reclaim 2-2.5x rm -rf of the same cache. A deletion already counts what it frees under
// the estimate rule (st_blocks of single-link files only: safefs.Stats.Bytes), so the
// deficit is tracked from that, one walk per entry. The other use of the estimate, leaving
// an entry whose files are all hard-linked elsewhere (a pnpm-style store linked into
// projects frees nothing), is kept this way: a file entry carries its lstat figures from
// the listing, so it is judged before anything is done, as before; a directory entry is
// judged before deletion only in a cache that has shown hard links, i.e. once an entry of
// it freed nothing although it held files. At most one such entry per cache goes for
// nothing before the cache is judged entry by entry.
func (r *Reclaimer) deleteOldest(ctx context.Context, f *fsRun, lr *ladderRun, all []*entry, open func(*cache) *openRoot) {
	linked := map[*cache]bool{} // caches whose directory entries are sized before deletion
	for i := 0; i < len(all) && !f.satisfied() && ctx.Err() == nil && f.err == nil; {
		needB, needF := f.deficit()
		var order []*cache
		res := map[*cache]*batchResult{}
		var gotB, gotF int64
		var n int
		for ; i < len(all) && (gotB < needB || gotF < needF) && n < 10_000 && ctx.Err() == nil; i++ {
			e := all[i]
			root := open(e.cache).root
			if e.dir && linked[e.cache] {
				sizeEntry(ctx, root, e, r.opts.SizeBudget, &lr.walks)
			}
			if e.sized && e.bytes == 0 && (needF == 0 || e.files == 0) {
				continue // frees nothing: its files are hard-linked elsewhere
			}
			b := res[e.cache]
			if b == nil {
				b = &batchResult{}
				res[e.cache] = b
				order = append(order, e.cache)
			}
			st, err := r.removeEntry(ctx, root, e.cache, e.name, e.dir)
			b.add(st, err)
			n++
			gotB += st.Bytes
			gotF += st.Files + st.Dirs
			if e.dir && !e.sized && st.Files > 0 && st.Bytes == 0 {
				linked[e.cache] = true
			}
		}
		if n == 0 {
			break
		}
		for _, c := range order {
			f.add(r.deleted(c, res[c], res[c].n))
		}
		f.remeasure(ctx, gotB, gotF)
	}
}
