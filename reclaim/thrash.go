package reclaim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// CondCacheThrashing is the condition of a load-bearing cache (CONTRACT §14): subject the
// cache's name, true while each of its last 3 prunes was half refilled within the hour.
const CondCacheThrashing = api.CondCacheThrashing

// refillForget is how long a cache's history is kept after its last prune.
const refillForget = 30 * 24 * time.Hour

// inUseClause is what a verdict and a refusal say of a thrashing cache.
const inUseClause = "this cache is in use: grow the disk"

// CacheRefill is one cache's refill figures, for status and metrics.
type CacheRefill struct {
	Name          string
	Path          string
	Thrashing     bool
	Since         time.Time // when Thrashing last changed
	LastFreed     int64     // what the last settled prune freed
	LastRegained  int64     // and what came back within the window after it
	RefilledBytes int64     // monotonic: what came back after every settled prune (this run of the daemon)
}

// thrashing reports whether c is a load-bearing cache; r.mu is not held.
func (r *Reclaimer) thrashing(c *cache) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.rate.Refills[c.Path]
	return h != nil && h.Thrashing()
}

// splitThrashing puts the thrashing caches of cs last: the ladder takes them only when
// the need cannot be met otherwise.
func (r *Reclaimer) splitThrashing(cs []*cache) (first, last []*cache) {
	for _, c := range cs {
		if r.thrashing(c) {
			last = append(last, c)
		} else {
			first = append(first, c)
		}
	}
	return first, last
}

// freedFrom is what the run's done actions on c freed.
func freedFrom(f *fsRun, c *cache) int64 {
	var b int64
	for _, a := range f.actions {
		if a.Status != api.ActionDone || a.FreedBytes <= 0 || (a.Kind != api.ActionDelete && a.Kind != api.ActionCommand) {
			continue
		}
		if a.Path == c.Path || strings.HasPrefix(a.Path, c.Path+": ") {
			b += a.FreedBytes
		}
	}
	return b
}

// notePrunes records, after a real climb, every cache it freed space from with its size
// walked now; a walk the call's deadline cuts is left to the next refill check.
func (r *Reclaimer) notePrunes(ctx context.Context, f *fsRun, lr *ladderRun) {
	type pruned struct {
		c           *cache
		freed, size int64
		baseline    float64
		u           safefs.Usage // the walk after the prune, when complete (size >= 0)
	}
	var ps []pruned
	for _, c := range lr.caches {
		freed := freedFrom(f, c)
		if freed <= 0 {
			continue
		}
		size := int64(-1)
		var usage safefs.Usage
		if o := lr.open(c); o.root != nil && ctx.Err() == nil {
			lr.walks++
			if u, err := o.root.Size(ctx, "", r.opts.SizeBudget); err == nil {
				size, usage = u.Bytes, u
			}
		}
		ps = append(ps, pruned{c: c, freed: freed, size: size, u: usage})
	}
	if len(ps) == 0 {
		return
	}
	now := r.opts.Now()
	r.mu.Lock()
	for i := range ps {
		// The background sizing's figures, not the walk after an earlier prune (which
		// updates what status shows): the baseline is the cache's growth between sizings.
		if ci, ok := r.sized[ps[i].c.Path]; ok && !ci.Partial && ps[i].size >= 0 {
			ps[i].baseline = GrowthBaseline(ci.EstimatedBytes, ci.SizedAt, ps[i].size+ps[i].freed, now)
		}
	}
	r.mu.Unlock()
	var events []api.Event
	r.mu.Lock()
	for _, p := range ps {
		h := r.refillFor(p.c)
		was := h.Thrashing()
		r.countRefill(h.Name, h.Pruned(now, p.freed, p.size, p.baseline))
		events = r.noteChange(events, h, was, now)
		if p.size >= 0 {
			// Status shows the cache as it is after the prune, not the size the last
			// background sizing measured before it (issue 23 item 8).
			for i := range r.caches {
				if r.caches[i].Path == p.c.Path {
					r.caches[i].EstimatedBytes, r.caches[i].EstimatedFiles = p.u.Bytes, p.u.Files+p.u.Dirs
					r.caches[i].Partial, r.caches[i].SizedAt = p.u.Partial, now
				}
			}
		}
	}
	r.saveLocked()
	r.mu.Unlock()
	r.emitAll(events)
}

// refillFor is c's history, made on first use; r.mu is held.
func (r *Reclaimer) refillFor(c *cache) *RefillHistory {
	h := r.rate.Refills[c.Path]
	if h == nil {
		h = &RefillHistory{Name: c.Name}
		r.rate.Refills[c.Path] = h
	}
	h.Name = c.Name
	return h
}

// countRefill adds what came back after settled prunes of a cache; r.mu is held.
func (r *Reclaimer) countRefill(name string, b int64) {
	if b > 0 {
		r.counters.RefilledBytes[name] += b
	}
}

// noteChange appends the condition event when h's verdict changed; r.mu is held.
func (r *Reclaimer) noteChange(events []api.Event, h *RefillHistory, was bool, now time.Time) []api.Event {
	is := h.Thrashing()
	if is == was {
		return events
	}
	h.Since = now
	msg := fmt.Sprintf("cache %s no longer refills after its prunes: CacheThrashing cleared", h.Name)
	if is {
		msg = thrashMessage(h) + "; it is pruned last from now on"
	}
	return append(events, api.Event{Kind: api.EventCondition, Subject: h.Name, Message: msg,
		Fields: map[string]any{"condition": CondCacheThrashing, "status": is}})
}

func (r *Reclaimer) emitAll(events []api.Event) {
	for _, ev := range events {
		r.emit(ev.Kind, ev.Subject, ev.Message, ev.Fields)
	}
}

// thrashMessage says what the last prunes of a thrashing cache got back.
func thrashMessage(h *RefillHistory) string {
	var got []string
	for i := len(h.Prunes) - 1; i >= 0 && len(got) < ThrashPrunes; i-- {
		if p := h.Prunes[i]; p.Settled {
			got = append(got, fmt.Sprintf("%s of %s", api.FormatSize(uint64(max(p.Regained, 0))), api.FormatSize(uint64(p.FreedBytes))))
		}
	}
	return fmt.Sprintf("cache %s got back at least half of what each of its last %d prunes freed within %s (%s): %s",
		h.Name, ThrashPrunes, api.FormatDuration(RefillWindow), strings.Join(got, ", "), inUseClause)
}

// CheckRefills walks the caches with a prune still in its refill window and notes what
// came back (Run calls it every RefillInterval; tests call it to drive the measurement).
// Histories of caches last pruned over 30 days ago are forgotten.
func (r *Reclaimer) CheckRefills(ctx context.Context) {
	now := r.opts.Now()
	r.mu.Lock()
	var open []string
	for p, h := range r.rate.Refills {
		if n := len(h.Prunes); n == 0 || now.Sub(h.Prunes[n-1].At) > refillForget {
			delete(r.rate.Refills, p)
			continue
		}
		if h.Open() {
			open = append(open, p)
		}
	}
	r.mu.Unlock()
	if len(open) == 0 {
		return
	}
	sort.Strings(open)
	byPath := map[string]*cache{}
	for _, c := range r.discover() {
		byPath[c.Path] = c
	}
	var events []api.Event
	for _, p := range open {
		size := int64(-1)
		if c := byPath[p]; c != nil && r.unsafeRoot(c.Path) == "" && ctx.Err() == nil {
			if root, err := r.openCache(c); err == nil {
				if u, err := root.Size(ctx, "", r.opts.SizeBudget); err == nil {
					size = u.Bytes
				}
				root.Close()
			}
		}
		r.mu.Lock()
		if h := r.rate.Refills[p]; h != nil {
			was := h.Thrashing()
			var b int64
			if size >= 0 {
				b += h.Observe(now, size)
			}
			b += h.Expire(now)
			r.countRefill(h.Name, b)
			events = r.noteChange(events, h, was, now)
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.saveLocked()
	r.mu.Unlock()
	r.emitAll(events)
}

// Refills lists every cache with a prune on record, by name.
func (r *Reclaimer) Refills() []CacheRefill {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refillsLocked()
}

func (r *Reclaimer) refillsLocked() []CacheRefill {
	var out []CacheRefill
	for p, h := range r.rate.Refills {
		cr := CacheRefill{Name: h.Name, Path: p, Thrashing: h.Thrashing(), Since: h.Since, RefilledBytes: r.counters.RefilledBytes[h.Name]}
		for i := len(h.Prunes) - 1; i >= 0; i-- {
			if pr := h.Prunes[i]; pr.Settled {
				cr.LastFreed, cr.LastRegained = pr.FreedBytes, max(pr.Regained, 0)
				break
			}
		}
		if cr.Since.IsZero() && len(h.Prunes) > 0 {
			cr.Since = h.Prunes[0].At
		}
		out = append(out, cr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// refillConditions are CacheThrashing per cache with a prune on record; r.mu is held.
func (r *Reclaimer) refillConditions() []api.Condition {
	var out []api.Condition
	for _, cr := range r.refillsLocked() {
		c := api.Condition{Type: CondCacheThrashing, Subject: cr.Name, Status: cr.Thrashing, Since: cr.Since, Severity: "warning",
			Reason: "Refills", Message: fmt.Sprintf("cache %s (%s) did not refill after its prunes", cr.Name, cr.Path)}
		if h := r.rate.Refills[cr.Path]; cr.Thrashing && h != nil {
			c.Reason, c.Message = "RefilledAfterPrunes", thrashMessage(h)+"; reclaim takes it last"
		} else if cr.LastFreed > 0 {
			c.Reason = "NotRefilled"
			c.Message = fmt.Sprintf("cache %s (%s): %s of the %s its last settled prune freed came back within %s",
				cr.Name, cr.Path, api.FormatSize(uint64(cr.LastRegained)), api.FormatSize(uint64(cr.LastFreed)), api.FormatDuration(RefillWindow))
		}
		out = append(out, c)
	}
	return out
}

// inUseNote is the fingerprint clause naming the thrashing caches of a filesystem.
func inUseNote(f *fsRun) string {
	if len(f.inUse) == 0 {
		return ""
	}
	verb := "kept"
	if f.inUsePruned {
		verb = "pruned only as far as the need, which could not be met otherwise"
	}
	setting := "; filesystem.size_setting can name what sizes it"
	if f.cur.SizeSetting != "" {
		setting = " (" + f.cur.SizeSetting + ")"
	}
	return fmt.Sprintf("cache %s got back at least half of what each of its last %d prunes freed within %s (%s; %s): %s%s",
		strings.Join(f.inUse, ", "), ThrashPrunes, api.FormatDuration(RefillWindow), CondCacheThrashing, verb, inUseClause, setting)
}

// InUseNote is the clause of a run's detail that names its thrashing caches ("" when
// none), so a launch refusal built from the run says it too.
func InUseNote(run api.ReclaimRun) string {
	for _, p := range strings.Split(run.Detail, "; ") {
		if strings.Contains(p, inUseClause) {
			return p
		}
	}
	return ""
}
