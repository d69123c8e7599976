package mountwatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Registration is what a mount registered at run time (CONTRACT §12) carries besides its
// MountConfig: the job it belongs to, whether releasing it unmounts it, and the expiry of
// the credential the runner pushed, if any.
type Registration struct {
	Job string
	// JobKey is Job as the jobs registry keys it (jobs.Key: ids are each owner's own), set
	// by the daemon: the end of that job, not of another uid's of the same id, releases
	// the mount.
	JobKey string
	// JobCgroup is that job's cgroup, set by the daemon: the mount's refresh_command and
	// remount_command start in it (startChildIn), so nothing they leave running outlives
	// the job.
	JobCgroup string
	// Unmount: a release (DELETE, or the end of Job) also syncs and unmounts the mount.
	Unmount bool
	// CredentialExpiresAt is the pushed credential's expiry; zero when none was pushed.
	CredentialExpiresAt time.Time
	RegisteredAt        time.Time
	// By is the peer that registered the mount; nil is root. A mount never does more than
	// By could do itself (registrant.go).
	By *Registrant
}

// regState is a registered mount's registration; the zero value is a configured mount.
type regState struct {
	reg     *Registration // non-nil for a mount registered at run time
	removed bool          // released: no worker may remount it any more
}

// Registered is one registered mount as the daemon persists it.
type Registered struct {
	Config MountConfig
	Reg    Registration
}

// Limits cap the registered mounts: in all, and of one uid other than root (the
// daemon's [mounts] max_registered and max_registered_per_uid).
type Limits struct {
	Max, PerUID int
}

// SetLimits sets the caps Add checks from now on; the mounts registered already stay.
// Add checks them under the same lock that adds the mount, so that concurrent
// registrations cannot overshoot them (issue 21: 10,000 concurrent ones reached 280 of 256).
func (w *Watcher) SetLimits(l Limits) {
	w.mu.Lock()
	w.limits = &l
	w.mu.Unlock()
}

// checkLimitsLocked refuses a registration by by past the caps; caller holds w.mu.
func (w *Watcher) checkLimitsLocked(by *Registrant) error {
	if w.limits == nil {
		return nil
	}
	all, mine := 0, 0
	for _, m := range w.mounts {
		if m.reg == nil {
			continue
		}
		all++
		if by != nil && m.reg.By != nil && m.reg.By.UID == by.UID {
			mine++
		}
	}
	if all >= w.limits.Max {
		return fmt.Errorf("%d mounts are registered, the most [mounts] max_registered (%d) allows: DELETE /v1/mounts/{name} of ended sessions first: %w",
			all, w.limits.Max, ErrLimit)
	}
	if !by.isRoot() && mine >= w.limits.PerUID {
		return fmt.Errorf("uid %d has %d mounts registered, the most one uid may ([mounts] max_registered_per_uid = %d): DELETE /v1/mounts/{name} of its ended sessions first: %w",
			by.UID, mine, w.limits.PerUID, ErrLimit)
	}
	return nil
}

// Errors of Add, Release and PushCredential; the daemon maps them to problem codes.
var (
	ErrLimit      = errors.New("registration limit reached") // 409
	ErrConflict   = errors.New("in use")                     // name or path of another mount: 409
	ErrUnknown    = errors.New("no such mount")              // 404
	ErrConfigured = errors.New("configured mount")           // not removable through the API: 403
)

// Add registers a mount at run time. It is watched exactly as a configured one from the
// next loop pass on (which Add triggers at once): probes as the owner, refresh, the remount
// ladder, links, guard, and Check. Names and paths must differ from every other mount's.
func (w *Watcher) Add(c MountConfig, r Registration) (api.Mount, error) {
	c, err := c.withDefaults()
	if err != nil {
		return api.Mount{}, err
	}
	entries, _ := readMountinfo(w.opts.ProcRoot)
	if err := checkRegistrant(c, r.By, entries); err != nil {
		return api.Mount{}, err
	}
	// The first read of the credential file decides the registration, before anything is
	// saved: a file sandboxd will not read (a device, a FIFO, a symlink, past the size cap,
	// unreadable by the registrant, no Expiration) is refused here rather than failing at
	// every start (issue 21).
	var first credential
	var firstStamp fileStamp
	if c.CredentialFile != "" {
		if first, firstStamp, err = readCredentialBounded(r.By, c.CredentialFile, c.RefreshAt); err != nil {
			return api.Mount{}, fmt.Errorf("credential_file: %w", err)
		}
	}
	now := w.opts.Now()
	if r.RegisteredAt.IsZero() {
		r.RegisteredAt = now
	}
	w.mu.Lock()
	for _, m := range w.mounts {
		kind := "configured in [[mount]]"
		if m.reg != nil {
			kind = "registered"
		}
		switch {
		case m.cfg.Name == c.Name:
			w.mu.Unlock()
			return api.Mount{}, fmt.Errorf("mount name %q: %w by a mount %s", c.Name, ErrConflict, kind)
		case m.cfg.Path == c.Path:
			w.mu.Unlock()
			return api.Mount{}, fmt.Errorf("path %s: %w by mount %q (%s)", c.Path, ErrConflict, m.cfg.Name, kind)
		}
	}
	if err := w.checkLimitsLocked(r.By); err != nil {
		w.mu.Unlock()
		return api.Mount{}, err
	}
	m := &mount{cfg: c, probeState: probeState{state: api.MountMissing, since: now},
		linkState: linkState{observedFix: map[string]bool{}}, regState: regState{reg: &r}}
	if !r.CredentialExpiresAt.IsZero() {
		m.cred = pushedCredential(r.RegisteredAt, r.CredentialExpiresAt, c.RefreshAt)
	}
	if c.CredentialFile != "" {
		m.cred, m.credStamp = first, firstStamp
	}
	w.mounts = append(w.mounts, m)
	w.counters.ensure(c.Name)
	v := m.view()
	w.mu.Unlock()
	msg := fmt.Sprintf("mount %s (%s) registered", c.Name, c.Path)
	if r.Job != "" {
		msg += " for job " + r.Job
	}
	msg += " by " + r.By.String()
	w.emit(api.EventMountRegistry, c.Name, msg, map[string]any{"job": r.Job, "path": c.Path, "registered_by": r.By.api()})
	w.changed()
	w.poke()
	return v, nil
}

// Registered lists the registered mounts with their current credential expiry, for the
// daemon's state file and for a rebuilt watcher to take over.
func (w *Watcher) Registered() []Registered {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Registered
	for _, m := range w.mounts {
		if m.reg == nil {
			continue
		}
		r := *m.reg
		if m.cred.known && m.cfg.CredentialFile == "" {
			r.CredentialExpiresAt = m.cred.expires
		}
		out = append(out, Registered{Config: m.cfg, Reg: r})
	}
	return out
}

// RegisteredBy is the registrant of the registered mount name (nil: root); registered is
// false for a configured or unknown mount.
func (w *Watcher) RegisteredBy(name string) (by *Registrant, registered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.find(name); m != nil && m.reg != nil {
		return m.reg.By, true
	}
	return nil, false
}

// CountRegistered is how many mounts are registered.
func (w *Watcher) CountRegistered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.mounts {
		if m.reg != nil {
			n++
		}
	}
	return n
}

// Get is one mount's view (configured or registered), and its job ("" when none).
func (w *Watcher) Get(name string) (api.Mount, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.find(name); m != nil {
		return m.view(), true
	}
	return api.Mount{}, false
}

// find is the mount named name; caller holds w.mu.
func (w *Watcher) find(name string) *mount {
	for _, m := range w.mounts {
		if m.cfg.Name == name {
			return m
		}
	}
	return nil
}

// JobMounts are the names of the registered mounts tied to the job of key (JobKey).
func (w *Watcher) JobMounts(key string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.mounts {
		if m.reg != nil && m.reg.Job != "" && m.reg.JobKey == key {
			out = append(out, m.cfg.Name)
		}
	}
	return out
}

// Retie sets the job key and cgroup of the registered mount name, tied to a job: the
// daemon restores registered mounts before the jobs registry is loaded when another
// sandboxd still holds it, and ties each to its job as the registry names it (re-keyed,
// its cgroup where it is) once loaded. It says whether anything changed; false for a mount
// that is not registered, tied to no job, or tied so already.
func (w *Watcher) Retie(name, key, cgroup string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.find(name)
	if m == nil || m.reg == nil || m.reg.Job == "" || m.reg.JobKey == key && m.reg.JobCgroup == cgroup {
		return false
	}
	m.reg.JobKey, m.reg.JobCgroup = key, cgroup
	return true
}

// PushCredential records a renewed credential's expiry that the runner pushed (PUT
// .../credentials): the refresh point moves to refresh_at of the new lifetime, counted from
// now, and a CredentialExpired condition clears.
func (w *Watcher) PushCredential(name string, expires time.Time) (api.Mount, error) {
	now := w.opts.Now()
	w.mu.Lock()
	m := w.find(name)
	if m == nil {
		w.mu.Unlock()
		return api.Mount{}, fmt.Errorf("mount %q: %w", name, ErrUnknown)
	}
	m.cred = pushedCredential(now, expires, m.cfg.RefreshAt)
	m.credExpiredSeen = false
	m.credBackoff, m.credNextTry = 0, time.Time{}
	add2(w.counters.Refreshes, name, "pushed")
	v := m.view()
	at := m.cred.refreshAt
	w.mu.Unlock()
	msg := fmt.Sprintf("credentials pushed for mount %s: now expire at %s", name, expires.UTC().Format(time.RFC3339))
	if len(m.cfg.RefreshCommand) > 0 {
		msg += fmt.Sprintf("; refresh_command runs at %s", at.UTC().Format(time.RFC3339))
	}
	w.emit(api.EventCredential, name, msg, map[string]any{"result": "pushed", "expires_at": expires.UTC(), "refresh_at": at.UTC()})
	w.changed()
	return v, nil
}

// changed tells the daemon that the registrations or their credentials changed.
func (w *Watcher) changed() {
	if w.opts.OnRegistryChange != nil {
		w.opts.OnRegistryChange()
	}
}

// poke makes the loop run a pass now instead of at its next tick.
func (w *Watcher) poke() {
	select {
	case w.reconf <- struct{}{}:
	default:
	}
}
