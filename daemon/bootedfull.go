package daemon

import (
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/reclaim"
)

// bootedFull turns the marker `sandboxd boot` left into the condition BootedFull, one per
// filesystem it found full, kept until the filesystem's free space (the workload's: the
// released reserve's room not counted) is back at or above its reclaim threshold. Then
// the condition turns false and the marker entry is dropped, so a restart does not
// raise it again.
type bootedFull struct {
	mu      sync.Mutex // guards the fields below
	at      time.Time
	marks   map[string]bootMarkEntry
	cleared map[string]time.Time // filesystems whose space came back, and when
}

// loadBootMarker reads the marker at start; a marker that cannot be read is one WARN line.
func (d *Daemon) loadBootMarker() {
	var doc bootDoc
	if err := d.state.Load(bootMarker, &doc); err != nil {
		d.logger.Warn("boot marker unreadable: BootedFull is not raised", "err", err)
		return
	}
	if doc.Filesystems == nil {
		doc.Filesystems = map[string]bootMarkEntry{}
	}
	// A reserve released from the host while the VM was stopped (`sandboxd image recover`)
	// leaves its marker next to the reserve, inside the image: the VM booted full as well.
	cfg := d.config()
	mountpoints := reclaim.MountPoints(d.opts.ProcRoot)
	for i, f := range cfg.Filesystems {
		if f.Reserve <= 0 {
			continue
		}
		if _, ok := doc.Filesystems[f.Path]; ok {
			continue
		}
		if text, ok := reclaim.ReadReleasedMarker(reservePath(cfg, i, mountpoints)); ok && reclaim.ReserveHeld(reservePath(cfg, i, mountpoints)) == 0 {
			doc.Filesystems[f.Path] = bootMarkEntry{Line: text, SizeSetting: f.SizeSetting}
			if doc.At.IsZero() {
				doc.At = d.now()
			}
		}
	}
	b := &d.booted
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at, b.marks, b.cleared = doc.At, doc.Filesystems, map[string]time.Time{}
	for fs, m := range doc.Filesystems {
		d.events.Record(api.Event{Kind: api.EventCondition, Subject: fs,
			Message: "BootedFull: " + m.Line, Fields: map[string]any{"released_bytes": m.ReleasedBytes}})
	}
}

// bootedFullConditions are the BootedFull conditions: true while the filesystem is below
// its reclaim threshold; the first sample at or above it clears the condition for good.
func (d *Daemon) bootedFullConditions() []api.Condition {
	b := &d.booted
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.marks) == 0 {
		return nil
	}
	figs := map[string]api.Filesystem{}
	for _, f := range d.current().pressure.Snapshot() {
		figs[f.Path] = f
	}
	paths := make([]string, 0, len(b.marks))
	for p := range b.marks {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []api.Condition
	changed := false
	for _, p := range paths {
		m := b.marks[p]
		c := api.Condition{Type: api.CondBootedFull, Subject: p, Status: true, Severity: "critical", Since: b.at,
			Reason: "BootedOnReserve", Message: "booted full: " + m.Line}
		f, ok := figs[p]
		if at, done := b.cleared[p]; done {
			c.Status, c.Since, c.Reason = false, at, "SpaceBack"
			c.Message = fmt.Sprintf("booted full at %s (%s); free space is back at or above the reclaim threshold", b.at.UTC().Format(time.RFC3339), m.Line)
		} else if ok && !f.SampledAt.IsZero() && !f.Unavailable() && f.SizeBytes > 0 && !f.BelowReclaim() {
			now := d.now()
			b.cleared[p] = now
			changed = true
			c.Status, c.Since, c.Reason = false, now, "SpaceBack"
			c.Message = fmt.Sprintf("booted full at %s (%s); free space is back: %s, at or above %s",
				b.at.UTC().Format(time.RFC3339), m.Line, f.Fingerprint(), f.ReclaimThresholdName())
			d.events.Record(api.Event{Kind: api.EventCondition, Subject: p, Message: "BootedFull cleared: " + c.Message})
		} else if ok && !f.SampledAt.IsZero() {
			c.Message += fmt.Sprintf("; now %s; kept until free space is back at or above %s", f.Fingerprint(), f.ReclaimThresholdName())
		}
		out = append(out, c)
	}
	if changed {
		left := maps.Clone(b.marks)
		for p := range b.cleared {
			delete(left, p)
		}
		d.state.Save(bootMarker, bootDoc{At: b.at, Filesystems: left})
	}
	return out
}
