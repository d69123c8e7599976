package mountwatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Snapshot lists the configured mounts in config order, as GET /v1/status shows them.
func (w *Watcher) Snapshot() []api.Mount {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]api.Mount, 0, len(w.mounts))
	for _, m := range w.mounts {
		out = append(out, m.view())
	}
	return out
}

// Others lists the FUSE mounts in mountinfo that are not configured (not probed: State
// is empty). It reads mountinfo when asked (reading it never blocks on a hung mount), so
// the supervisor loop need not re-read it every tick when no mount is configured.
func (w *Watcher) Others() []api.Mount {
	entries, _ := readMountinfo(w.opts.ProcRoot) // lines that parse are listed
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.otherMounts(entries)
}

// view renders m; caller holds w.mu.
func (m *mount) view() api.Mount {
	v := api.Mount{
		Name: m.cfg.Name, Path: m.cfg.Path, FSType: m.entry.FSType, Source: m.entry.Source,
		Required: m.cfg.Required, State: m.state, Errno: m.errno, Since: m.since,
		LastProbeSeconds: m.lastProbeDur, RemountsTotal: m.remounts, Links: []api.Link{},
	}
	if m.reg != nil {
		v.Registered, v.Job = true, m.reg.Job
		v.RegisteredBy = m.reg.By.api()
	}
	if !m.lastProbeAt.IsZero() {
		t := m.lastProbeAt
		v.LastProbeAt = &t
	}
	if m.cred.known {
		t := m.cred.expires
		v.CredentialExpiresAt = &t
	}
	v.CredentialError = m.cred.err
	if len(m.links) > 0 {
		v.Links = append([]api.Link(nil), m.links...)
	}
	v.Recovery = m.recovery()
	return v
}

// recovery names what remediation does for this mount (api.Mount.Recovery).
func (m *mount) recovery() string {
	r := "wait"
	switch {
	case m.cfg.RemountUnit != "":
		r = "remount_unit"
	case len(m.cfg.RemountCommand) > 0:
		r = "remount_command"
	}
	if len(m.cfg.RefreshCommand) > 0 {
		r = "refresh, then " + r
	}
	return r
}

// detail is the fingerprint line of an unhealthy mount; caller holds w.mu.
func (m *mount) detail() string {
	if !m.probed {
		return fmt.Sprintf("mount %s (%s) has not been probed yet", m.cfg.Name, m.cfg.Path)
	}
	s := fmt.Sprintf("mount %s (%s) is %s since %s", m.cfg.Name, m.cfg.Path, m.state, m.since.UTC().Format(time.RFC3339))
	if m.errno != "" {
		s += ": " + m.errno
		if m.op != "" {
			s += " on " + m.op
		}
	} else if m.msg != "" {
		s += ": " + m.msg
	}
	if m.cred.known && m.cred.expired(time.Now()) {
		s += fmt.Sprintf(" (credential expired at %s)", m.cred.expires.UTC().Format(time.RFC3339))
	}
	return s
}

// ReasonCredentialExpired is the MountUnavailable reason of a mount whose credential
// passed its expiry without a refresh while its probes still pass.
const ReasonCredentialExpired = "CredentialExpired"

// expiredDetail is the fingerprint line of a mount whose credential expired; caller holds w.mu.
func (m *mount) expiredDetail() string {
	s := fmt.Sprintf("mount %s (%s) is %s but its credential expired at %s without a refresh (%s)", m.cfg.Name, m.cfg.Path,
		m.state, m.cred.expires.UTC().Format(time.RFC3339), ReasonCredentialExpired)
	if len(m.cfg.RefreshCommand) == 0 {
		s += fmt.Sprintf("; no refresh_command: push the renewed expiry with PUT /v1/mounts/%s/credentials", m.cfg.Name)
	} else if m.cred.err != "" {
		s += "; " + m.cred.err
	}
	return s
}

func (m *mount) healthy() bool { return m.probed && m.state == api.MountHealthy }

// hostRequired: the mount gates every launch on the host and makes health critical. A
// mount registered by a peer other than root never does, whatever its required: one
// writer's mount on an empty directory of its own made every launch on the host exit 75
// (issue 21); it gates the launches that name it, as a mount with required = false does.
func (m *mount) hostRequired() bool { return m.cfg.Required && (m.reg == nil || m.reg.By.isRoot()) }

// Conditions returns a MountUnavailable condition for every unhealthy mount: critical
// when the mount is required, a warning otherwise.
func (w *Watcher) Conditions() []api.Condition {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []api.Condition
	now := w.opts.Now()
	for _, m := range w.mounts {
		sev := api.HealthWarning
		if m.hostRequired() {
			sev = api.HealthCritical
		}
		if m.healthy() && m.cred.expired(now) {
			// Raised before any caller sees EACCES: the runner learns it first (§12).
			out = append(out, api.Condition{Type: api.CondMountUnavailable, Subject: m.cfg.Name, Status: true,
				Reason: ReasonCredentialExpired, Message: m.expiredDetail(), Since: m.cred.expires, Severity: sev})
			continue
		}
		if m.healthy() || (!m.probed && m.state != api.MountMissing) {
			continue
		}
		out = append(out, api.Condition{Type: api.CondMountUnavailable, Subject: m.cfg.Name, Status: true,
			Reason: m.state, Message: m.detail(), Since: m.since, Severity: sev})
	}
	return out
}

// Check is the launch call's step 3 (CONTRACT §5): every required mount and every named
// one must be healthy. unknown lists names not configured (the daemon answers not_found);
// detail is the fingerprint line for mount_unavailable, one clause per failing mount.
func (w *Watcher) Check(names []string) (mounts []api.Mount, unknown []string, detail string, ok bool) {
	return w.CheckJob(names, "")
}

// CheckJob is Check for a launch of the job of jobKey (the jobs registry's key, "" for
// none): the required mounts tied to that job gate it as if named (issue 21: a writer's
// required mount gates only the launches that name it or its job).
func (w *Watcher) CheckJob(names []string, jobKey string) (mounts []api.Mount, unknown []string, detail string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// No map per call: a launch (the hot path) names a few mounts, usually none.
	var bad []string
	for _, m := range w.mounts {
		ofJob := jobKey != "" && m.reg != nil && m.reg.JobKey == jobKey && m.cfg.Required
		if !m.hostRequired() && !ofJob && !slices.Contains(names, m.cfg.Name) {
			continue
		}
		mounts = append(mounts, m.view())
		switch {
		case !m.healthy():
			bad = append(bad, m.detail())
		case m.cred.expired(w.opts.Now()):
			bad = append(bad, m.expiredDetail()) // fail closed: its next request will be denied
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(w.mounts, func(m *mount) bool { return m.cfg.Name == n }) {
			unknown = append(unknown, n)
		}
	}
	return mounts, unknown, strings.Join(bad, "; "), len(bad) == 0 && len(unknown) == 0
}

// Counters returns a copy of the counters for the metrics.
func (w *Watcher) Counters() Counters {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counters.clone()
}

// Resume is the resume hook's part (CONTRACT §6.1): every credential past its refresh
// point is refreshed, then every mount is probed now (in parallel, as its owner), so the
// status right after a resume is current. It answers the refresh actions.
func (w *Watcher) Resume(ctx context.Context) []api.Action {
	w.mu.Lock()
	none := len(w.mounts) == 0
	w.mu.Unlock()
	if none {
		return nil // nothing to probe: a healthy resume must cost about a statfs
	}
	entries, _ := readMountinfo(w.opts.ProcRoot)
	w.mu.Lock()
	w.discover(entries)
	mounts := append([]*mount(nil), w.mounts...)
	w.mu.Unlock()
	var (
		wg      sync.WaitGroup
		amu     sync.Mutex
		actions []api.Action
	)
	for _, m := range mounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, ok := w.resumeRefresh(ctx, m); ok {
				amu.Lock()
				actions = append(actions, a)
				amu.Unlock()
			}
			w.resumeProbe(ctx, m)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	amu.Lock()
	defer amu.Unlock()
	return append([]api.Action(nil), actions...)
}

func (w *Watcher) resumeRefresh(ctx context.Context, m *mount) (api.Action, bool) {
	if len(m.cfg.RefreshCommand) == 0 || (m.cfg.CredentialFile == "" && !m.cred.known) {
		return api.Action{}, false
	}
	if m.cfg.CredentialFile != "" {
		w.reloadCredential(m)
	}
	w.mu.Lock()
	due := m.cred.due(w.opts.Now()) || !m.cred.known
	start := due && !m.busy
	if start {
		m.busy = true
	}
	w.mu.Unlock()
	if !due {
		return api.Action{}, false
	}
	if !start {
		return api.Action{Source: m.cfg.Name, Path: m.cfg.CredentialFile, Kind: api.ActionCommand,
			Status: api.ActionSkipped, Error: "a refresh or remount is already running"}, true
	}
	defer w.release(m)
	return w.refresh(ctx, m, "resume")
}

func (w *Watcher) resumeProbe(ctx context.Context, m *mount) {
	w.mu.Lock()
	present, remounting := m.present, m.remounting
	w.mu.Unlock()
	if remounting {
		return
	}
	if !present {
		w.apply(m, outcome{state: api.MountMissing, msg: "not mounted", at: w.opts.Now()})
		return
	}
	if o := w.probeNow(m, m.cfg.Canary); o.ok || o.state != "" {
		w.apply(m, o)
	}
}
