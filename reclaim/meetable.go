package reclaim

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/api"
)

// dirSlack is what deleting a directory may free beyond its files (a block on ext4):
// the upper bound of what the ladder can free counts it, so as never to under-estimate.
const dirSlack = 4096

// Meetable says, deleting nothing, whether reclaim could ever give the filesystem
// measured as m the free bytes and inodes a call needs (CONTRACT §6, "Do no harm"). A
// need above the filesystem's size, or above free plus everything the ladder could
// free (every site's entries, every cache root on the filesystem, sized now; never the
// reserve, which is not the workload's: CONTRACT §13), cannot be met: why says so with the figures, and the caller refuses at once
// instead of deleting caches for nothing. When the caches cannot be sized in full
// (a walk cut by its budget or ctx) nothing is proved and ok is true.
func (r *Reclaimer) Meetable(ctx context.Context, m api.Filesystem, needBytes, needInodes uint64) (ok bool, why string) {
	if m.SizeBytes > 0 && needBytes > m.SizeBytes {
		return false, fmt.Sprintf("no reclaim can free %s on a filesystem of %s in all: reclaim deleted nothing",
			api.FormatSize(needBytes), api.FormatSize(m.SizeBytes))
	}
	if m.Files > 0 && needInodes > m.Files {
		return false, fmt.Sprintf("no reclaim can free %s inodes on a filesystem of %s inodes in all: reclaim deleted nothing",
			api.FormatCount(needInodes), api.FormatCount(m.Files))
	}
	avail := m.WorkloadAvail()
	shortBytes := avail < needBytes
	shortInodes := m.Files > 0 && m.FilesFree < needInodes
	if !shortBytes && !shortInodes {
		return true, ""
	}
	bytes, files, complete := r.reclaimable(ctx, m)
	if !complete {
		return true, ""
	}
	switch {
	case shortBytes && avail+uint64(bytes) < needBytes:
		return false, fmt.Sprintf("reclaim could free at most %s more (caches and site entries on it), short of %s: reclaim deleted nothing",
			api.FormatSize(uint64(bytes)), api.FormatSize(needBytes))
	case shortInodes && m.FilesFree+uint64(files) < needInodes:
		return false, fmt.Sprintf("reclaim could free at most %s more inodes, short of %s: reclaim deleted nothing",
			api.FormatCount(uint64(files)), api.FormatCount(needInodes))
	}
	return true, ""
}

// reclaimable is an upper bound of what the whole ladder could free on m's filesystem.
func (r *Reclaimer) reclaimable(ctx context.Context, m api.Filesystem) (bytes, files int64, complete bool) {
	r.settings.RLock() // the launch call holds neither lock nor loop
	defer r.settings.RUnlock()
	if r.opts.SiteUsage != nil {
		b, n := r.opts.SiteUsage() // every site, wherever it lies: an over-estimate is safe
		bytes += b
		files += n
	}
	dev := statDev(m.Path)
	if dev == 0 {
		return 0, 0, false
	}
	for _, c := range r.discover() {
		if r.unsafeRoot(c.Path) != "" || statDev(c.Path) != dev {
			continue
		}
		root, err := r.openCache(c)
		if err != nil {
			continue // a root the ladder would skip frees nothing
		}
		u, err := root.Size(ctx, "", r.opts.SizeBudget)
		root.Close()
		if err != nil || u.Partial {
			return 0, 0, false
		}
		bytes += u.Bytes + u.Dirs*dirSlack
		files += u.Files + u.Dirs
	}
	return bytes, files, true
}
