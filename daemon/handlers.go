package daemon

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/reclaim"
)

func (d *Daemon) handleLivez(w http.ResponseWriter, r *http.Request) error {
	age := d.now().Sub(time.Unix(0, d.lastLoop.Load()))
	if age > 3*supervisorPeriod {
		writeJSON(w, http.StatusServiceUnavailable, api.Livez{Status: "stalled",
			Reason: "supervisor loop last ran " + api.FormatDuration(age) + " ago"})
		return nil
	}
	writeJSON(w, http.StatusOK, api.Livez{Status: "ok"})
	return nil
}

func (d *Daemon) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	if why := d.current().notReady(); why != "" {
		writeJSON(w, http.StatusServiceUnavailable, api.Livez{Status: "not ready", Reason: why})
		return nil
	}
	writeJSON(w, http.StatusOK, api.Livez{Status: "ok"})
	return nil
}

func (d *Daemon) handleHealth(w http.ResponseWriter, r *http.Request) error {
	h := d.healthNow()
	code := http.StatusOK
	if h.Status == api.HealthCritical {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
	return nil
}

func (d *Daemon) features() []string {
	f := []string{api.FeatureLaunch, api.FeatureResume, api.FeatureReclaim, api.FeatureMounts,
		api.FeatureEvents, api.FeatureMetrics, api.FeatureRuntimeMounts}
	if ok, _ := d.jobReg.Available(); ok {
		f = append(f, api.FeatureJobs)
	}
	return f
}

// Status builds the body of GET /v1/status.
func (d *Daemon) Status() api.Status {
	c := d.current()
	st := api.Status{
		APIVersion:  api.Version,
		Features:    d.features(),
		Jobs:        jobsSummary(d.jobReg),
		Mode:        d.config().Server.Mode,
		Offline:     c.reclaim.Offline(),
		Version:     d.opts.Version,
		StartedAt:   d.started,
		Ready:       c.ready(),
		Filesystems: nonNil(c.pressure.Snapshot()),
		Sites:       nonNil(c.sites.Snapshot()),
		Mounts:      nonNil(c.mounts.Snapshot()),
		OtherMounts: nonNil(c.mounts.Others()),
		Caches:      cacheRoots(c.reclaim.Caches()),
		Reclaim:     c.reclaim.Last(),
		Conditions:  d.conditions(),
		State:       api.StateInfo{Dir: d.state.Dir(), Persistent: d.state.Err() == nil},
	}
	if err := d.state.Err(); err != nil {
		st.State.Error = err.Error() + " (state is kept in memory until a write succeeds)"
	}
	return st
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (d *Daemon) handleStatus(w http.ResponseWriter, r *http.Request) error {
	return d.writeStatus(w)
}

// handleEvents answers the audit trail after since=N. With wait=DURATION (at most 60 s)
// it waits for a newer event when there is none yet, for `sandboxd events --follow`.
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request) error {
	var since uint64
	if s := r.URL.Query().Get("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return api.NewProblem(api.CodeBadRequest, "query parameter \"since\": want a sequence number, got %q", s)
		}
		since = n
	}
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			return api.NewProblem(api.CodeBadRequest, "query parameter \"wait\": want a duration such as \"30s\", got %q", s)
		}
		wait = min(v, 60*time.Second)
	}
	events, next, dropped, changed := d.events.Since(since)
	if len(events) == 0 && wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		events, next, dropped, _ = d.events.Since(since)
	}
	writeJSON(w, http.StatusOK, api.EventsPage{Events: events, Next: next, Dropped: dropped})
	return nil
}

func (d *Daemon) handleConfig(w http.ResponseWriter, r *http.Request) error {
	b, err := config.Marshal(d.config())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ConfigView{TOML: string(b), InForce: d.inForce()})
	return nil
}

// inForce reads the values whose zero has a meaning of its own back from the running
// components, so a "0s" that a default replaced would show here (issue 10).
func (d *Daemon) inForce() map[string]any {
	c := d.current()
	t := c.pressure.Timings()
	return map[string]any{
		"health.sample_interval":   t.SampleInterval.String(),
		"health.transition_period": t.TransitionPeriod.String(),
		"reclaim.lead_time":        t.LeadTime.String(),
		"reclaim.cooldown":         c.reclaim.Cooldown().String(),
	}
}

func cacheRoots(in []reclaim.CacheInfo) []api.CacheRoot {
	out := make([]api.CacheRoot, 0, len(in))
	for _, c := range in {
		r := api.CacheRoot{Name: c.Name, Kind: c.Kind, Path: c.Path, Declared: c.Declared, OwnerUID: c.Owner,
			Ladder: c.Ladder, Order: c.Order, EstimatedBytes: c.EstimatedBytes, EstimatedFiles: c.EstimatedFiles,
			Partial: c.Partial, Problem: c.Problem}
		if !c.SizedAt.IsZero() {
			t := c.SizedAt
			r.SizedAt = &t
		}
		out = append(out, r)
	}
	return out
}
