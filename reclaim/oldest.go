package reclaim

import "context"

// maxBatchEntries bounds the entries one batch of rung 3 takes before the filesystem is
// measured again.
const maxBatchEntries = 10_000

// freesNothing: a sized entry frees nothing the deficit asks for when it frees no bytes
// (its files are all hard-linked elsewhere, as in a pnpm-style store linked into
// projects) and either no inodes are wanted or it holds none.
func (e *entry) freesNothing(needFiles int64) bool {
	return e.sized && e.bytes == 0 && (needFiles == 0 || e.files == 0)
}

// inBatches is rung 3's loop over all (oldest first): batch takes entries from the front
// of rest toward the deficit (at most maxBatchEntries), reports them, and says how many of
// rest it went through, how many it took, and what they freed (or, simulated, would free);
// then the filesystem is measured again, until it is satisfied or a batch takes nothing.
func (f *fsRun) inBatches(ctx context.Context, all []*entry, batch func(rest []*entry, needB, needF int64) (used, took int, gotB, gotF int64)) {
	for i := 0; i < len(all) && !f.satisfied() && ctx.Err() == nil && f.err == nil; {
		needB, needF := f.deficit()
		used, took, gotB, gotF := batch(all[i:], needB, needF)
		i += used
		if took == 0 {
			break
		}
		f.remeasure(ctx, gotB, gotF)
	}
}

// planOldest is rung 3 of a simulated run: each entry is sized with a budgeted walk, and
// a batch is planned (one action per cache) once its estimates cover the deficit.
func (r *Reclaimer) planOldest(ctx context.Context, f *fsRun, lr *ladderRun, all []*entry) {
	f.inBatches(ctx, all, func(rest []*entry, needB, needF int64) (used, took int, estB, estF int64) {
		var batch []*entry
		for ; used < len(rest) && (estB < needB || estF < needF) && len(batch) < maxBatchEntries; used++ {
			e := rest[used]
			sizeEntry(ctx, lr.open(e.cache).root, e, r.opts.SizeBudget, &lr.walks)
			if e.freesNothing(needF) {
				continue
			}
			batch = append(batch, e)
			estB += e.bytes
			estF += e.files
		}
		var order []*cache
		by := map[*cache][]*entry{}
		for _, e := range batch {
			if _, ok := by[e.cache]; !ok {
				order = append(order, e.cache)
			}
			by[e.cache] = append(by[e.cache], e)
		}
		for _, c := range order {
			f.add(plannedDelete(c, by[c], f.simStatus))
		}
		return used, len(batch), estB, estF
	})
}

// deleteOldest is rung 3 of a real run: entries (oldest first) are deleted until what
// they freed covers the deficit, then the filesystem is re-measured, and so on.
//
// Each entry is walked once, by its deletion: the deficit is tracked from what a deletion
// counts as freed, which is the estimate's own rule (st_blocks of single-link files only:
// safefs.Stats.Bytes), so nothing is sized first. What sizing first would catch, an entry
// whose files are all hard-linked elsewhere and so frees nothing (a pnpm-style store
// linked into projects), is caught so: a file entry carries its lstat figures from the
// listing and is judged before anything is done; a directory entry is sized and judged
// first only in a cache that has shown hard links (an entry of it held files and freed no
// bytes). A cache's first directory entry is deleted alone to find that out, so a cache
// linked throughout loses one entry for nothing; one that turns out linked later may lose
// one per remover worker in flight.
//
// Entries are deleted by a remover, a few at once; the deficit is tracked from what the
// finished ones freed, so a batch overshoots by at most the entries in flight.
func (r *Reclaimer) deleteOldest(ctx context.Context, f *fsRun, lr *ladderRun, all []*entry) {
	linked := map[*cache]bool{} // caches whose directory entries are sized before deletion
	probed := map[*cache]bool{} // caches whose first directory entry was deleted alone
	rm := r.newRemover(ctx)
	defer rm.close()
	f.inBatches(ctx, all, func(rest []*entry, needB, needF int64) (used, took int, gotB, gotF int64) {
		var order []*cache
		res := map[*cache]*batchResult{}
		collect := func(done []removal) {
			for _, d := range done {
				res[d.e.cache].add(d.st, d.err)
				gotB += d.st.Bytes
				gotF += d.st.Files + d.st.Dirs
				if d.e.dir && !d.e.sized && d.st.Files > 0 && d.st.Bytes == 0 {
					linked[d.e.cache] = true
				}
			}
		}
		for ; used < len(rest) && took < maxBatchEntries && ctx.Err() == nil; used++ {
			collect(rm.room())
			if gotB >= needB && gotF >= needF {
				break
			}
			e := rest[used]
			root := lr.open(e.cache).root
			if e.dir && linked[e.cache] {
				sizeEntry(ctx, root, e, r.opts.SizeBudget, &lr.walks)
			}
			if e.freesNothing(needF) {
				continue
			}
			if res[e.cache] == nil {
				res[e.cache] = &batchResult{}
				order = append(order, e.cache)
			}
			rm.submit(root, e)
			took++
			if e.dir && !probed[e.cache] {
				// A cache's first directory entry goes alone: whether it freed anything
				// decides how the others are judged before more are in flight.
				probed[e.cache] = true
				collect(rm.wait())
			}
		}
		collect(rm.wait())
		for _, c := range order {
			f.add(r.deleted(c, res[c], res[c].n))
		}
		return used, took, gotB, gotF
	})
}
