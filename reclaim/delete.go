package reclaim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

var trashCounter atomic.Uint64

// trashName is a fresh trash name: the clock keeps names unique across restarts, the
// counter within one process (and NOREPLACE refuses a clash anyway).
func trashName(now time.Time) string {
	return trashPrefix + strconv.FormatInt(now.UnixNano(), 36) + "-" + strconv.FormatUint(trashCounter.Add(1), 36)
}

// removeEntry deletes one entry of an open cache. A non-directory is unlinked at once
// (an unlink is atomic: nothing can be left half-deleted); a directory is first renamed
// into the trash so a deadline or a crash leaves it whole at its path or gone from it.
func (r *Reclaimer) removeEntry(ctx context.Context, root *safefs.Root, c *cache, name string, dir bool) (safefs.Stats, error) {
	opts := safefs.RemoveOptions{MakeWritable: c.kind.makeWritable}
	if !dir {
		return root.Remove(ctx, name, opts)
	}
	t := trashName(r.opts.Now())
	if err := root.Rename(name, t); err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV) {
			return safefs.Stats{Skipped: 1}, fmt.Errorf("%s/%s holds a mount point: left alone: %w", c.Path, name, err)
		}
		return safefs.Stats{}, err
	}
	return root.RemoveDir(ctx, t, opts) // listed as a directory: no statx before the open
}

// removeWorkers is how many entries a reclaim deletes at once. A cache's entries are
// directories of their own (a package, a module, a build-cache shard), so unlinks in two of
// them do not queue on one directory's lock the way a site's files do, and a second core
// cuts the wall time of a big cache well under rm -rf's (docs/benchmarks.md). A reclaim
// runs when a filesystem is short of space and a caller is waiting: it may use the cores.
func removeWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), 4)) }

// removal is one entry handed to a remover, and what deleting it did.
type removal struct {
	root *safefs.Root
	e    *entry
	st   safefs.Stats
	err  error
}

// remover deletes entries on a few goroutines. room waits, when every worker is busy, for
// one to finish and returns what it did; submit hands an entry over (after room); wait
// collects the rest. Results come back in the order they finish; at most removeWorkers
// entries are in flight, which is all a caller tracking a deficit can overshoot by.
type remover struct {
	jobs, results chan removal
	inflight, n   int
}

func (r *Reclaimer) newRemover(ctx context.Context) *remover {
	n := removeWorkers()
	m := &remover{jobs: make(chan removal), results: make(chan removal, n), n: n}
	for range n {
		go func() {
			for j := range m.jobs {
				j.st, j.err = r.removeEntry(ctx, j.root, j.e.cache, j.e.name, j.e.dir)
				m.results <- j
			}
		}()
	}
	return m
}

func (m *remover) room() []removal {
	if m.inflight < m.n {
		return nil
	}
	m.inflight--
	return []removal{<-m.results}
}

func (m *remover) submit(root *safefs.Root, e *entry) {
	m.jobs <- removal{root: root, e: e}
	m.inflight++
}

func (m *remover) wait() []removal {
	done := make([]removal, 0, m.inflight)
	for ; m.inflight > 0; m.inflight-- {
		done = append(done, <-m.results)
	}
	return done
}

// close ends the workers; whatever is in flight must have been waited for.
func (m *remover) close() { close(m.jobs) }

// batchResult sums what a batch did in one cache.
type batchResult struct {
	stats safefs.Stats
	n     int
	errs  []error
}

func (b *batchResult) add(st safefs.Stats, err error) {
	b.stats.Files += st.Files
	b.stats.Dirs += st.Dirs
	b.stats.Bytes += st.Bytes
	b.n++
	if err != nil {
		b.errs = append(b.errs, err)
	}
}

// plannedDelete is the action a simulated run reports for deleting entries of one cache:
// their estimates, with status (planned or observed).
func plannedDelete(c *cache, es []*entry, status string) api.Action {
	a := api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: status}
	for _, e := range es {
		a.FreedBytes += e.bytes
		a.FreedFiles += e.files
	}
	return a
}

// deleteEntries deletes entries (all of one cache, root open) and returns the action.
func (r *Reclaimer) deleteEntries(ctx context.Context, root *safefs.Root, c *cache, es []*entry) api.Action {
	var res batchResult
	rm := r.newRemover(ctx)
	defer rm.close()
	add := func(done []removal) {
		for _, d := range done {
			res.add(d.st, d.err)
		}
	}
	for _, e := range es {
		if ctx.Err() != nil {
			res.errs = append(res.errs, ctx.Err())
			break
		}
		add(rm.room())
		rm.submit(root, e)
	}
	add(rm.wait())
	return r.deleted(c, &res, len(es))
}

// deleted makes the action of what a batch did in cache c (of total entries tried) and
// reports it.
func (r *Reclaimer) deleted(c *cache, res *batchResult, total int) api.Action {
	a := api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete}
	a.FreedBytes, a.FreedFiles = res.stats.Bytes, res.stats.Files+res.stats.Dirs
	a.Status = api.ActionDone
	if len(res.errs) > 0 {
		a.Error = fmt.Sprintf("%s of %s entries failed, first: %v", api.FormatCount(uint64(len(res.errs))), api.FormatCount(uint64(total)), res.errs[0])
		if res.stats.Files+res.stats.Dirs == 0 {
			a.Status = api.ActionFailed
		}
	}
	msg := fmt.Sprintf("deleted %s entries of %s (%s files, %s)", api.FormatCount(uint64(res.n)), c.Path, api.FormatCount(uint64(max(a.FreedFiles, 0))), api.FormatSize(uint64(max(a.FreedBytes, 0))))
	fields := map[string]any{"cache": c.Path, "entries": res.n, "files": a.FreedFiles, "bytes": a.FreedBytes}
	if a.Error != "" {
		fields["error"] = a.Error
		msg += ": " + a.Error
	}
	r.emit(api.EventDelete, c.Name, msg, fields)
	return a
}

// emptyTrash deletes what a crash or a deadline left in a cache's trash.
func (r *Reclaimer) emptyTrash(ctx context.Context, root *safefs.Root, c *cache, walks *int64) (api.Action, bool) {
	*walks++
	// Names only: statx on each of a big cache's entries just to find the trash cost as
	// much as a tenth of deleting the cache.
	names, err := root.ReadNames("")
	if err != nil {
		return api.Action{}, false
	}
	var todo []*entry
	for _, n := range names {
		if isTrash(n) {
			todo = append(todo, &entry{cache: c, name: n})
		}
	}
	if len(todo) == 0 {
		return api.Action{}, false
	}
	a := api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete, Status: api.ActionDone}
	var n int
	for _, e := range todo {
		st, err := root.Remove(ctx, e.name, safefs.RemoveOptions{MakeWritable: true})
		a.FreedBytes += st.Bytes
		a.FreedFiles += st.Files + st.Dirs
		if err != nil && a.Error == "" {
			a.Error = err.Error()
		}
		n++
	}
	r.emit(api.EventDelete, c.Name, fmt.Sprintf("emptied %s leftover trash entries of %s (%s files, %s)", api.FormatCount(uint64(n)), c.Path, api.FormatCount(uint64(max(a.FreedFiles, 0))), api.FormatSize(uint64(max(a.FreedBytes, 0)))),
		map[string]any{"cache": c.Path, "entries": n, "files": a.FreedFiles, "bytes": a.FreedBytes, "trash": true})
	return a, true
}
