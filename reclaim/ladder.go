package reclaim

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

// ladderRun is one reclaim run's climbs of the ladder. Every filesystem's climb shares the
// host's mount points, rung 1 (global: it runs once per reclaim) and the walk count; the
// climb in progress has its caches and owns their roots, opened on first use (open) and
// closed when the climb ends.
type ladderRun struct {
	r         *Reclaimer
	mounts    []string // every mount point of the host
	sitesDone bool     // rung 1 ran
	walks     int64    // directory reads and Size walks

	f      *fsRun   // the filesystem being climbed
	caches []*cache // on f, in ladder order
	roots  map[*cache]*openRoot
}

// openRoot is an open cache root with its owner.
type openRoot struct {
	root     *safefs.Root
	uid, gid uint32
	err      error
}

// open is c's root, opened on first use. A cache that cannot be opened is skipped,
// with an action and a refusal event that say why (once a climb).
func (lr *ladderRun) open(c *cache) *openRoot {
	if o, ok := lr.roots[c]; ok {
		return o
	}
	o := &openRoot{}
	root, err := lr.r.openCache(c)
	if err != nil {
		o.err = err
		lr.f.add(api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: api.ActionSkipped, Error: err.Error()})
		lr.r.emit(api.EventRefusal, c.Name, fmt.Sprintf("cache %s skipped: %v", c.Path, err), map[string]any{"cache": c.Path})
	} else {
		o.root, o.uid, o.gid = root, root.UID(), root.GID()
	}
	lr.roots[c] = o
	return o
}

// closeRoots closes what open opened.
func (lr *ladderRun) closeRoots() {
	for _, o := range lr.roots {
		if o.root != nil {
			o.root.Close()
		}
	}
	lr.roots = nil
}

// ladder walks the rungs of CONTRACT §6.2 on one filesystem, stopping as soon as it is
// satisfied. Each rung that frees less than it estimated simply leaves the filesystem
// unsatisfied, so the next entries and the next rung follow: that is the escalation.
func (r *Reclaimer) ladder(ctx context.Context, f *fsRun, lr *ladderRun) {
	f.ran = true
	lr.f, lr.roots = f, map[*cache]*openRoot{}
	defer lr.closeRoots()
	// A thrashing cache (CacheThrashing: it refills after each prune) is taken only
	// after every rung of every other cache, and then only as far as the need: what the
	// call needs, else the replace threshold (an explicit target_free is a need too).
	// Pruning it to the comfort target (threshold plus headroom) only buys a re-download
	// that brings the disk back where it was within the hour.
	all := lr.caches
	first, last := r.splitThrashing(all)
	for _, c := range last {
		f.inUse = append(f.inUse, c.Name)
	}
	type step struct {
		caches    []*cache
		rung      func(context.Context, *fsRun, *ladderRun)
		expensive bool // commands and whole caches: held by the cooldown (issue 23)
	}
	steps := []step{
		{all, r.rungTrash, false}, {first, r.rungSites, false}, {first, r.rungGC, true}, {first, r.rungEntries, false}, {first, r.rungWhole, true},
		{last, r.rungGC, true}, {last, r.rungEntries, false}, {last, r.rungWhole, true},
	}
	savedB, savedF := f.targetBytes, f.targetFiles
	for i, s := range steps {
		if i == 5 && !f.targetFree {
			f.targetBytes = min(f.targetBytes, max(f.needBytes, f.cur.ReplaceThresholdBytes))
			f.targetFiles = min(f.targetFiles, max(f.needFiles, f.cur.ReplaceThresholdFiles))
		}
		if f.satisfied() || ctx.Err() != nil || f.err != nil {
			break
		}
		if i >= 5 && len(s.caches) == 0 {
			break
		}
		if s.expensive && f.held != "" {
			continue
		}
		lr.caches = s.caches
		n := len(f.actions)
		s.rung(ctx, f, lr)
		if i >= 5 && len(f.actions) > n {
			f.inUsePruned = true
		}
		for _, a := range f.actions[n:] {
			if s.expensive && (a.Status == api.ActionDone || a.Status == api.ActionFailed) {
				f.expensive = true
			}
		}
	}
	f.targetBytes, f.targetFiles = savedB, savedF
	lr.caches = all
	if !f.simulate {
		r.notePrunes(ctx, f, lr)
	}
	if f.held != "" && !f.satisfied() && ctx.Err() == nil {
		f.later = r.heldBytes(ctx, f, lr)
	}
	f.belowReplace = f.cur.BelowReplace()
}

// heldBytes is what the held rungs could free on f's filesystem once they may run: the
// size of every cache whose ladder allows a whole-cache deletion (a bound of rung 4; rung
// 2's garbage collection frees part of the same bytes).
func (r *Reclaimer) heldBytes(ctx context.Context, f *fsRun, lr *ladderRun) int64 {
	var total int64
	for _, c := range lr.caches {
		if c.Ladder != LadderAll || r.keptOffline(c) || ctx.Err() != nil {
			continue
		}
		o := lr.open(c)
		if o.root == nil {
			continue
		}
		lr.walks++
		if u, err := o.root.Size(ctx, "", r.opts.SizeBudget); err == nil {
			total += u.Bytes
		}
	}
	return total
}

// add records an action. What a real one freed is accounted as sandboxd's own free, so the
// daemon's reclaim sawtooth does not read as "not filling" (the growth rate is net). Site
// prunes are accounted by retention, which also prunes outside a reclaim.
func (f *fsRun) add(a api.Action) {
	f.actions = append(f.actions, a)
	real := a.Status == api.ActionDone || a.Status == api.ActionFailed
	if f.ownFree != nil && real && a.FreedBytes > 0 && a.Kind != api.ActionPruneSite {
		f.ownFree(f.path, a.FreedBytes)
	}
}

// rungTrash empties what an earlier run left in the caches' trash (a crash, a deadline).
func (r *Reclaimer) rungTrash(ctx context.Context, f *fsRun, lr *ladderRun) {
	if f.simulate {
		return
	}
	for _, c := range lr.caches {
		o := lr.open(c)
		if o.root == nil {
			continue
		}
		if a, ok := r.emptyTrash(ctx, o.root, c, &lr.walks); ok {
			f.add(a)
			f.remeasure(ctx, a.FreedBytes, a.FreedFiles)
		}
	}
}

// rungSites is rung 1: expired site entries, through the daemon's retention.
func (r *Reclaimer) rungSites(ctx context.Context, f *fsRun, lr *ladderRun) {
	if r.opts.PruneSites == nil || lr.sitesDone {
		return
	}
	lr.sitesDone = true
	acts := r.opts.PruneSites(ctx, f.simulate)
	var b, n int64
	for _, a := range acts {
		if f.simulate && a.Status == api.ActionPlanned && r.opts.Observe {
			a.Status = api.ActionObserved
		}
		b += a.FreedBytes
		n += a.FreedFiles
		f.add(a)
	}
	if len(acts) > 0 {
		f.remeasure(ctx, b, n)
	}
}

// rungGC is rung 2: each cache's own garbage collection, which keeps what is referenced.
func (r *Reclaimer) rungGC(ctx context.Context, f *fsRun, lr *ladderRun) {
	for _, c := range lr.caches {
		if f.satisfied() || ctx.Err() != nil {
			return
		}
		argv := commandFor(c, false)
		if len(argv) == 0 {
			continue
		}
		if a, ok := r.command(ctx, f, lr, c, argv); ok {
			f.add(a)
		}
	}
}

// command runs one gc or wipe command as a ladder step and re-measures. ok is false when
// the tool is not installed (nothing to report for a discovered kind's optional tool).
func (r *Reclaimer) command(ctx context.Context, f *fsRun, lr *ladderRun, c *cache, argv []string) (api.Action, bool) {
	a := api.Action{Source: c.source(), Path: c.Path + ": " + strings.Join(argv, " "), Kind: api.ActionCommand}
	if _, err := r.opts.LookPath(argv[0]); err != nil {
		if c.kind != declaredKind {
			return a, false
		}
		a.Status, a.Error = api.ActionSkipped, fmt.Sprintf("%s not installed", argv[0])
		return a, true
	}
	if f.simulate {
		a.Status = f.simStatus
		return a, true
	}
	if why := r.idle(c); why != "" {
		a.Status, a.Error = api.ActionSkipped, why
		r.emit(api.EventCommand, c.Name, fmt.Sprintf("skipped %s for %s: %s", strings.Join(argv, " "), c.Path, why), map[string]any{"cache": c.Path})
		return a, true
	}
	o := lr.open(c)
	if o.root == nil {
		a.Status, a.Error = api.ActionSkipped, o.err.Error()
		return a, true
	}
	before := f.cur
	err := r.runCommand(ctx, c, argv, o.uid, o.gid)
	f.remeasure(ctx, 0, 0)
	a.FreedBytes = int64(f.cur.AvailBytes) - int64(before.AvailBytes)
	a.FreedFiles = int64(f.cur.FilesFree) - int64(before.FilesFree)
	a.Status = api.ActionDone
	if err != nil {
		a.Status, a.Error = api.ActionFailed, err.Error()
	}
	return a, true
}

// rungEntries is rung 3: cache entries, oldest first, never one younger than MinAge. A dry
// run plans from estimates (each directory entry sized with a budgeted walk); a real run
// deletes in one pass (deleteOldest).
func (r *Reclaimer) rungEntries(ctx context.Context, f *fsRun, lr *ladderRun) {
	cutoff := r.opts.Now().Add(-r.opts.MinAge)
	var all []*entry
	for _, c := range lr.caches {
		if r.keptOffline(c) {
			f.add(api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: api.ActionSkipped, Error: offlineKept})
			continue
		}
		if c.Ladder == LadderGC || r.idle(c) != "" {
			continue // a busy tool's files stay: deleting under a running install breaks it
		}
		o := lr.open(c)
		if o.root == nil {
			continue
		}
		l := &lister{ctx: ctx, root: o.root, c: c, mounts: mountsUnder(lr.mounts, c.Path), walks: &lr.walks}
		for _, e := range l.list() {
			if e.age.Before(cutoff) {
				all = append(all, &e)
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].cache.Order != all[j].cache.Order {
			return all[i].cache.Order < all[j].cache.Order
		}
		return all[i].age.Before(all[j].age)
	})
	if f.simulate {
		r.planOldest(ctx, f, lr, all)
		return
	}
	r.deleteOldest(ctx, f, lr, all)
}

// rungWhole is rung 4: whole caches and the tools' wipe commands, where ladder = all.
func (r *Reclaimer) rungWhole(ctx context.Context, f *fsRun, lr *ladderRun) {
	for _, c := range lr.caches {
		if f.satisfied() || ctx.Err() != nil || f.err != nil {
			return
		}
		if c.Ladder != LadderAll || r.keptOffline(c) || r.idle(c) != "" {
			continue
		}
		o := lr.open(c)
		if o.root == nil {
			continue
		}
		lr.walks++
		u, err := o.root.Size(ctx, "", r.opts.SizeBudget)
		_, needF := f.deficit()
		if f.simulate {
			var planned bool
			if u, planned = f.leftAfterPlan(c, u); planned && u.Bytes == 0 && needF == 0 {
				continue // rung 3's plan already empties it: nothing more to say
			}
		}
		if err == nil && u.Files+u.Dirs == 0 {
			continue // empty (rung 3 may have just emptied it): nothing to do, nothing to say
		}
		if err == nil && u.Bytes == 0 && needF == 0 {
			f.add(api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: api.ActionSkipped,
				Error: "would free nothing: its files are hard-linked elsewhere"})
			continue
		}
		if argv := commandFor(c, true); len(argv) > 0 {
			if a, ok := r.command(ctx, f, lr, c, argv); ok {
				if f.simulate && a.Status == f.simStatus {
					a.FreedBytes, a.FreedFiles = u.Bytes, u.Files+u.Dirs
				}
				f.add(a)
				if a.Status == api.ActionDone || f.simulate && a.Status == f.simStatus {
					if f.simulate {
						f.remeasure(ctx, u.Bytes, u.Files+u.Dirs)
					}
					continue
				}
			}
		}
		r.deleteWhole(ctx, f, lr, c, o.root, u)
	}
}

// deleteWhole deletes every top-level entry of a cache (the root itself stays, so the
// tool's own layout and permissions are kept).
func (r *Reclaimer) deleteWhole(ctx context.Context, f *fsRun, lr *ladderRun, c *cache, root *safefs.Root, u safefs.Usage) {
	lr.walks++
	top, err := root.ReadDir("")
	if err != nil {
		f.add(api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: api.ActionFailed, Error: err.Error()})
		return
	}
	mounts := mountsUnder(lr.mounts, c.Path)
	var es []*entry
	for _, e := range top {
		l := lister{mounts: mounts}
		if isTrash(e.Name) || e.Dev != root.Dev() || l.holdsMount(e.Name) {
			continue
		}
		es = append(es, &entry{cache: c, name: e.Name, dir: e.Type == unix.S_IFDIR})
	}
	if f.simulate {
		a := plannedDelete(c, es, f.simStatus)
		a.FreedBytes, a.FreedFiles = u.Bytes, u.Files+u.Dirs
		f.add(a)
	} else {
		f.add(r.deleteEntries(ctx, root, c, es))
	}
	f.remeasure(ctx, u.Bytes, u.Files+u.Dirs)
}

// offlineKept is the reason on the skipped action of a cache kept by [reclaim] offline.
const offlineKept = "kept: reclaim.offline is set and only a download refills this cache"

// keptOffline reports whether c stops at rung 2 because the sandbox is offline.
func (r *Reclaimer) keptOffline(c *cache) bool {
	return r.opts.Offline && c.kind != nil && c.kind.download
}

// Offline reports whether [reclaim] offline is in force.
func (r *Reclaimer) Offline() bool { return r.opts.Offline }
