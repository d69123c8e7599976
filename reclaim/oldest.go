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
// it freed nothing although it held files. A cache's first directory entry is deleted
// alone, so a cache linked throughout loses one entry for nothing, as before; one that
// turns linked later may lose one per remover worker in flight.
//
// Entries are deleted by a remover, a few at once; the deficit is tracked from what the
// finished ones freed, so a batch overshoots by at most the entries in flight.
func (r *Reclaimer) deleteOldest(ctx context.Context, f *fsRun, lr *ladderRun, all []*entry) {
	linked := map[*cache]bool{} // caches whose directory entries are sized before deletion
	probed := map[*cache]bool{} // caches whose first directory entry was deleted alone
	rm := r.newRemover(ctx)
	defer rm.close()
	for i := 0; i < len(all) && !f.satisfied() && ctx.Err() == nil && f.err == nil; {
		needB, needF := f.deficit()
		var order []*cache
		res := map[*cache]*batchResult{}
		var gotB, gotF int64
		var n int
		took := func(done []removal) {
			for _, d := range done {
				res[d.e.cache].add(d.st, d.err)
				gotB += d.st.Bytes
				gotF += d.st.Files + d.st.Dirs
				if d.e.dir && !d.e.sized && d.st.Files > 0 && d.st.Bytes == 0 {
					linked[d.e.cache] = true
				}
			}
		}
		for ; i < len(all) && n < 10_000 && ctx.Err() == nil; i++ {
			took(rm.room())
			if gotB >= needB && gotF >= needF {
				break
			}
			e := all[i]
			root := lr.open(e.cache).root
			if e.dir && linked[e.cache] {
				sizeEntry(ctx, root, e, r.opts.SizeBudget, &lr.walks)
			}
			if e.sized && e.bytes == 0 && (needF == 0 || e.files == 0) {
				continue // frees nothing: its files are hard-linked elsewhere
			}
			if res[e.cache] == nil {
				res[e.cache] = &batchResult{}
				order = append(order, e.cache)
			}
			rm.submit(root, e)
			n++
			if e.dir && !probed[e.cache] {
				// A cache's first directory entry goes alone: whether it freed anything
				// decides how the others are judged before more are in flight.
				probed[e.cache] = true
				took(rm.wait())
			}
		}
		took(rm.wait())
		if n == 0 {
			break
		}
		for _, c := range order {
			f.add(r.deleted(c, res[c], res[c].n))
		}
		f.remeasure(ctx, gotB, gotF)
	}
}
