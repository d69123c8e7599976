package reclaim

import (
	"context"
	"errors"
	"fmt"
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

// deleteEntries deletes entries (all of one cache, root open) and returns the action.
func (r *Reclaimer) deleteEntries(ctx context.Context, root *safefs.Root, c *cache, es []*entry, simulate string) api.Action {
	a := api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete}
	if simulate != "" {
		for _, e := range es {
			a.FreedBytes += e.bytes
			a.FreedFiles += e.files
		}
		a.Status = simulate
		return a
	}
	var res batchResult
	for _, e := range es {
		if ctx.Err() != nil {
			res.errs = append(res.errs, ctx.Err())
			break
		}
		res.add(r.removeEntry(ctx, root, c, e.name, e.dir))
	}
	return r.deleted(c, &res, len(es))
}

// deleted makes the action of what a batch did in cache c (of total entries tried) and
// reports it.
func (r *Reclaimer) deleted(c *cache, res *batchResult, total int) api.Action {
	a := api.Action{Source: c.source(), Path: c.Path, Kind: api.ActionDelete}
	a.FreedBytes, a.FreedFiles = res.stats.Bytes, res.stats.Files+res.stats.Dirs
	a.Status = api.ActionDone
	if len(res.errs) > 0 {
		a.Error = fmt.Sprintf("%d of %d entries failed, first: %v", len(res.errs), total, res.errs[0])
		if res.stats.Files+res.stats.Dirs == 0 {
			a.Status = api.ActionFailed
		}
	}
	msg := fmt.Sprintf("deleted %d entries of %s (%d files, %s)", res.n, c.Path, a.FreedFiles, api.FormatSize(uint64(a.FreedBytes)))
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
	r.emit(api.EventDelete, c.Name, fmt.Sprintf("emptied %d leftover trash entries of %s (%d files, %s)", n, c.Path, a.FreedFiles, api.FormatSize(uint64(a.FreedBytes))),
		map[string]any{"cache": c.Path, "entries": n, "files": a.FreedFiles, "bytes": a.FreedBytes, "trash": true})
	return a, true
}
