package daemon

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// healthTracker remembers the overall health status so that a change of it is one event.
type healthTracker struct {
	now    func() time.Time
	record func(api.Event)

	mu   sync.Mutex // guards last
	last string
}

func newHealthTracker(now func() time.Time, record func(api.Event)) *healthTracker {
	return &healthTracker{now: now, record: record, last: api.HealthOK}
}

// conditions gathers every component's conditions, sorted by type then subject.
func (d *Daemon) conditions() []api.Condition {
	c := d.current()
	var out []api.Condition
	out = append(out, c.pressure.Conditions()...)
	out = append(out, c.sites.Conditions()...)
	out = append(out, c.reclaim.Conditions()...)
	out = append(out, c.mounts.Conditions()...)
	out = append(out, c.jobs.Conditions()...)
	out = append(out, d.persistCondition()...)
	out = append(out, d.bootedFullConditions()...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Subject < out[j].Subject
	})
	if out == nil {
		out = []api.Condition{}
	}
	return out
}

// healthNow computes /v1/health: critical when an active condition is critical, warning
// when any condition is active, ok otherwise.
func (d *Daemon) healthNow() api.Health {
	conds := d.conditions()
	status := api.HealthOK
	var active []string
	for _, c := range conds {
		if !c.Status {
			continue
		}
		active = append(active, c.Type+"("+c.Subject+")")
		if c.Severity == api.HealthCritical {
			status = api.HealthCritical
		} else if status == api.HealthOK {
			status = api.HealthWarning
		}
	}
	summary := "no active conditions"
	if len(active) > 0 {
		summary = strings.Join(active, ", ")
	}
	h := api.Health{Status: status, Conditions: conds, Summary: summary}
	d.health.observe(h)
	return h
}

func (t *healthTracker) observe(h api.Health) {
	t.mu.Lock()
	prev := t.last
	t.last = h.Status
	t.mu.Unlock()
	if prev != h.Status {
		t.record(api.Event{Kind: api.EventCondition, Subject: "health",
			Message: fmt.Sprintf("sandbox health %s -> %s: %s", prev, h.Status, h.Summary),
			Fields:  map[string]any{"from": prev, "to": h.Status}})
	}
}

// statusLine is the one-line summary sent to systemd as STATUS=.
func (d *Daemon) statusLine(h api.Health) string {
	var parts []string
	for _, fs := range d.current().pressure.Snapshot() {
		if fs.SizeBytes == 0 && !fs.Stale {
			continue
		}
		s := fmt.Sprintf("%s %.0f%% used, %s free", fs.Path, fs.UsedRatio*100, api.FormatSize(fs.AvailBytes))
		if fs.Stale {
			s += " (stale)"
		}
		parts = append(parts, s)
	}
	line := h.Status
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, "; ")
	}
	if h.Status != api.HealthOK {
		line += " [" + h.Summary + "]"
	}
	if d.observe() {
		line += " (observe mode)"
	}
	return line
}
