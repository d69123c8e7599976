package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/runas"
	"github.com/sandboxd/sandboxd/jobs"
	"github.com/sandboxd/sandboxd/mountwatch"
)

// Runtime mounts (CONTRACT §12): the /v1/mounts handlers, the translation of a
// registration into a mountwatch.MountConfig with the [[mount]] defaults and rules, the
// state file that keeps registrations over a restart, and the tie of a mount to its job.

// mountsStateDoc is the state document of registered mounts.
const mountsStateDoc = "mounts.json"

// savedMount is one registered mount in the state file: the registration as the runner
// sent it, with the expiry the credential has now.
type savedMount struct {
	Registration api.MountRegistration `json:"registration"`
	RegisteredAt time.Time             `json:"registered_at"`
	// RegisteredBy is the peer whose rights the mount acts with (mountwatch/registrant.go).
	RegisteredBy *api.Registrant `json:"registered_by,omitempty"`
	// JobKey is the tied job's key in the jobs registry (jobs.Key); "" in a state file
	// written before job ids were each owner's own: the registrant's own job.
	JobKey string `json:"job_key,omitempty"`
}

func (d *Daemon) handleMountsList(w http.ResponseWriter, r *http.Request) error {
	c := d.current()
	writeJSON(w, http.StatusOK, api.MountList{Mounts: nonNil(c.mounts.Snapshot()), Registered: c.mounts.CountRegistered(),
		MaxRegistered: int(d.config().RuntimeMounts.MaxRegistered), MaxRegisteredPerUID: int(d.config().RuntimeMounts.MaxPerUID),
		Quarantined: d.quarantinedView()})
	return nil
}

func (d *Daemon) handleMountGet(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	m, ok := d.current().mounts.Get(name)
	if !ok {
		return api.NewProblem(api.CodeNotFound, "no mount %q: neither configured in [[mount]] nor registered (POST /v1/mounts)", name)
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func (d *Daemon) handleMountsAdd(w http.ResponseWriter, r *http.Request) error {
	var req api.MountRegistration
	warnings, err := api.DecodeRequest(r.Body, &req)
	if err != nil {
		return err
	}
	p := peerFrom(r.Context())
	by := &mountwatch.Registrant{UID: p.UID, GID: p.GID, Groups: p.Groups}
	if p.PID > 0 {
		by.PidNS, _ = os.Readlink(filepath.Join(d.opts.ProcRoot, strconv.Itoa(int(p.PID)), "ns", "pid"))
	}
	m, err := d.RegisterMount(req, by, time.Time{})
	if err != nil {
		return err
	}
	if req.Required != nil && *req.Required && p.UID != 0 && p.UID != uint32(os.Geteuid()) {
		warnings = append(warnings, fmt.Sprintf("required: a mount registered by uid %d gates only the launches that name it (\"mounts\") or its job (\"job\"), never every launch on the host, and its trouble is a warning, not critical", p.UID))
	}
	type answer struct {
		api.Mount
		Warnings []string `json:"warnings,omitempty"`
	}
	writeJSON(w, http.StatusCreated, answer{Mount: m, Warnings: warnings})
	return nil
}

// RegisterMount validates and registers a mount (POST /v1/mounts) for the peer by, whose
// rights the mount then acts with. registeredAt is zero for a new registration, and the
// original time for one restored from the state file.
func (d *Daemon) RegisterMount(req api.MountRegistration, by *mountwatch.Registrant, registeredAt time.Time) (api.Mount, error) {
	cfg := d.config()
	mc, reg, err := mountFromRequestAs(req, cfg, by)
	if err != nil {
		return api.Mount{}, err
	}
	reg.RegisteredAt, reg.By = registeredAt, by
	if reg.Job != "" && d.mountJobs == nil {
		// Accepting it would promise a release that nothing would ever trigger.
		return api.Mount{}, api.NewProblem(api.CodeJobsUnavailable, "field \"job\": this daemon runs no jobs registry, so a mount cannot be tied to job %q; register it without a job and DELETE it when the session ends", reg.Job)
	}
	if reg.Job != "" {
		if ok, why := d.mountJobs.available(); !ok {
			return api.Mount{}, api.NewProblem(api.CodeJobsUnavailable, "field \"job\": jobs are unavailable here (%s), so a mount cannot be tied to job %q", why, reg.Job)
		}
		if err := d.mountJobs.waiting(); err != nil {
			return api.Mount{}, err
		}
		uid := uint32(0)
		if by != nil {
			uid = by.UID
		}
		// The registrant's own job of that id (ids are each owner's own), else the only one.
		key, owner, alive, why := d.mountJobs.job(reg.Job, uid)
		if !alive {
			return api.Mount{}, api.NewProblem(api.CodeNotFound, "job %q %s: a mount can only be tied to a running job (POST /v1/jobs first)", reg.Job, why)
		}
		// Tying a mount to another uid's job would let that uid's end of the job release
		// it, and the mount's release would follow a job its registrant does not own.
		if by != nil && by.UID != 0 && by.UID != uint32(os.Geteuid()) && owner != by.UID {
			return api.Mount{}, api.NewProblem(api.CodeForbidden, "field \"job\": job %q belongs to uid %d: a mount is tied only to a job of the uid that registers it (you are uid %d)", reg.Job, owner, by.UID)
		}
		reg.JobKey, reg.JobCgroup = key, d.mountJobs.cgroup(key)
	}
	w := d.current().mounts
	m, err := w.Add(mc, reg)
	switch {
	case errors.Is(err, mountwatch.ErrLimit):
		return api.Mount{}, api.NewProblem(api.CodeConflict, "%s", strings.TrimSuffix(err.Error(), ": "+mountwatch.ErrLimit.Error()))
	case errors.Is(err, mountwatch.ErrConflict):
		return api.Mount{}, api.NewProblem(api.CodeConflict, "%v", err)
	case errors.Is(err, mountwatch.ErrForbidden):
		d.logger.Warn("mount registration refused", "mount", req.Name, "uid", by.UID, "err", err)
		return api.Mount{}, api.NewProblem(api.CodeForbidden, "%s", strings.TrimSuffix(err.Error(), ": "+mountwatch.ErrForbidden.Error()))
	case errors.Is(err, mountwatch.ErrCredentialFile) && errors.Is(err, fs.ErrPermission):
		d.logger.Warn("mount registration refused", "mount", req.Name, "uid", by.UID, "err", err)
		return api.Mount{}, api.NewProblem(api.CodeForbidden, "%v: the credential file is read with the rights of the peer that registers the mount", err)
	case err != nil:
		return api.Mount{}, api.NewProblem(api.CodeBadRequest, "%v", err)
	}
	d.unquarantine(mc.Name)
	return m, nil
}

func (d *Daemon) handleMountDelete(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	var unmount *bool
	if r.URL.Query().Get("unmount") != "" {
		b, err := queryBool(r, "unmount", false)
		if err != nil {
			return err
		}
		unmount = &b
	}
	if err := d.mayManageMount(r, name, false); err != nil {
		return err
	}
	rel, err := d.releaseMount(r.Context(), name, unmount, "DELETE /v1/mounts/"+name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rel)
	return nil
}

// releaseMount releases one registered mount and maps the watcher's errors to problems.
func (d *Daemon) releaseMount(ctx context.Context, name string, unmount *bool, why string) (api.MountRelease, error) {
	m, steps, unmounted, err := d.current().mounts.Release(context.WithoutCancel(ctx), name, unmount, why)
	switch {
	case errors.Is(err, mountwatch.ErrUnknown):
		return api.MountRelease{}, api.NewProblem(api.CodeNotFound, "no mount %q: neither configured in [[mount]] nor registered (POST /v1/mounts)", name)
	case errors.Is(err, mountwatch.ErrConfigured):
		return api.MountRelease{}, api.NewProblem(api.CodeForbidden, "%v", err)
	case err != nil:
		return api.MountRelease{}, err
	}
	return api.MountRelease{Mount: m, Unmounted: unmounted, Steps: nonNil(steps)}, nil
}

func (d *Daemon) handleMountCredentials(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	var req api.CredentialPush
	warnings, err := api.DecodeRequest(r.Body, &req)
	if err != nil {
		return err
	}
	if req.ExpiresAt == nil {
		return api.NewProblem(api.CodeBadRequest, "field \"expires_at\": required, an RFC 3339 time such as %q", d.now().Add(15*time.Minute).UTC().Format(time.RFC3339))
	}
	if err := checkExpiry("expires_at", *req.ExpiresAt); err != nil {
		return err
	}
	if !req.ExpiresAt.After(d.now()) {
		return api.NewProblem(api.CodeBadRequest, "field \"expires_at\": %s is not in the future (now %s): push the renewed credential's expiry",
			req.ExpiresAt.UTC().Format(time.RFC3339), d.now().UTC().Format(time.RFC3339))
	}
	if err := d.mayManageMount(r, name, true); err != nil {
		return err
	}
	m, err := d.current().mounts.PushCredential(name, *req.ExpiresAt)
	if errors.Is(err, mountwatch.ErrUnknown) {
		return api.NewProblem(api.CodeNotFound, "no mount %q: neither configured in [[mount]] nor registered (POST /v1/mounts)", name)
	}
	if err != nil {
		return err
	}
	type answer struct {
		api.Mount
		Warnings []string `json:"warnings,omitempty"`
	}
	writeJSON(w, http.StatusOK, answer{Mount: m, Warnings: warnings})
	return nil
}

// mayManageMount: a registered mount is released or pushed to by the peer that registered
// it, root, or the daemon's own uid; another writer gets 403 (it would act on someone
// else's session with that peer's rights). A configured mount takes pushes only from root,
// the daemon's uid and its push_uids (issue 21: a writer's push ran root's
// refresh_command on demand and could set an expiry that failed root's launches).
func (d *Daemon) mayManageMount(r *http.Request, name string, push bool) error {
	p := peerFrom(r.Context())
	if !p.Known || p.UID == 0 || p.UID == uint32(os.Geteuid()) {
		return nil
	}
	by, registered := d.current().mounts.RegisteredBy(name)
	if !registered {
		if _, exists := d.current().mounts.Get(name); !exists || !push {
			return nil // 404 follows; a release of a configured mount is refused (403) by the watcher
		}
		for _, m := range d.config().Mounts {
			if m.Name == name && slices.Contains(m.PushUIDs, p.UID) {
				return nil
			}
		}
		d.logger.Warn("refused: a configured mount", "mount", name, "uid", p.UID, "pid", p.PID)
		return api.NewProblem(api.CodeForbidden, "mount %q is configured in [[mount]]: only root may push its credentials, or a uid in its push_uids (you are uid %d)", name, p.UID)
	}
	if by == nil || by.UID == p.UID {
		return nil
	}
	d.logger.Warn("refused: a registered mount of another uid", "mount", name, "uid", p.UID, "pid", p.PID, "registered_by", by.UID)
	return api.NewProblem(api.CodeForbidden, "mount %q was registered by uid %d: only that uid or root may release it or push its credentials (you are uid %d)", name, by.UID, p.UID)
}

// mountFromRequestAs is mountFromRequest with the paths walked with by's filesystem
// credentials (issue 21): walked as root, a path under /root answered 400 naming a
// symlink's target where a missing one answered 403 — an oracle of what only root may see.
// As the caller, both stop at the directory it cannot search.
func mountFromRequestAs(req api.MountRegistration, cfg *config.Config, by *mountwatch.Registrant) (mc mountwatch.MountConfig, reg mountwatch.Registration, err error) {
	if aerr := runas.AsFS(by.Cred(), func() error { mc, reg, err = mountFromRequest(req, cfg); return nil }); aerr != nil {
		return mc, reg, api.NewProblem(api.CodeInternal, "act as the registering peer: %v", aerr)
	}
	return mc, reg, err
}

// pathProblem is the answer to a path that failed checkRegisteredPath: 403 when the
// registering peer may not search a directory on the way (the walk runs with its rights),
// else 400.
func pathProblem(field string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return api.NewProblem(api.CodeForbidden, "field %q: %v: the path is resolved with the rights of the registering peer, which cannot search a directory on the way", field, err)
	}
	return api.NewProblem(api.CodeBadRequest, "field %q: %v", field, err)
}

// mountFromRequest applies the [[mount]] defaults and rules to a registration: names as
// site names, an absolute path other than "/" that neither is nor contains a protected
// path, links outside the mount, argv commands.
func mountFromRequest(req api.MountRegistration, cfg *config.Config) (mountwatch.MountConfig, mountwatch.Registration, error) {
	def := config.DefaultMount()
	bad := func(field, format string, args ...any) error {
		return api.NewProblem(api.CodeBadRequest, "field %q: %s", field, fmt.Sprintf(format, args...))
	}
	var zero mountwatch.MountConfig
	if err := config.CheckName(req.Name); err != nil {
		return zero, mountwatch.Registration{}, bad("name", "%v", err)
	}
	if !path.IsAbs(req.Path) {
		return zero, mountwatch.Registration{}, bad("path", "%q must be an absolute path", req.Path)
	}
	p := path.Clean(req.Path)
	if err := checkRegisteredPath(p, false, cfg); err != nil {
		return zero, mountwatch.Registration{}, pathProblem("path", err)
	}
	// Required defaults to false for a registered mount (docs/api.md §12): a session's
	// mount is named by that session's launches (mounts, --mount); required would make one
	// session's broken mount refuse every launch on the host.
	mc := mountwatch.MountConfig{Name: req.Name, Path: p, Required: false, ProbeInterval: def.ProbeInterval,
		ProbeTimeout: def.ProbeTimeout, Canary: def.Canary, RemountUnit: req.RemountUnit, RemountCommand: req.RemountCommand,
		CredentialFile: req.CredentialFile, RefreshCommand: req.RefreshCommand, RefreshAt: def.RefreshAt,
		MaxRemountsPerHour: int(def.MaxRemountsPerHour), RemountTimeout: def.RemountTimeout, Guard: def.Guard}
	if req.Required != nil {
		mc.Required = *req.Required
	}
	if req.Canary != nil {
		mc.Canary = *req.Canary
	}
	if req.Guard != nil {
		mc.Guard = *req.Guard
	}
	for _, k := range []struct {
		field string
		v     *api.Duration
		to    *time.Duration
	}{{"probe_interval", req.ProbeInterval, &mc.ProbeInterval}, {"probe_timeout", req.ProbeTimeout, &mc.ProbeTimeout}} {
		if k.v == nil {
			continue
		}
		if d := k.v.D(); d < config.MinProbeInterval || d > config.MaxProbeInterval {
			return zero, mountwatch.Registration{}, bad(k.field, "%s: want a duration from %s to %s", api.FormatDuration(d),
				api.FormatDuration(config.MinProbeInterval), api.FormatDuration(config.MaxProbeInterval))
		}
		*k.to = k.v.D()
	}
	if req.RefreshAt != nil {
		if !(*req.RefreshAt > 0 && *req.RefreshAt < 1) {
			return zero, mountwatch.Registration{}, bad("refresh_at", "%v: want a fraction of the credential's lifetime strictly between 0 and 1, such as 0.8", *req.RefreshAt)
		}
		mc.RefreshAt = *req.RefreshAt
	}
	if req.RemountTimeout != nil {
		if d := req.RemountTimeout.D(); d < config.MinRemountTimeout || d > config.MaxRemountTimeout {
			return zero, mountwatch.Registration{}, bad("remount_timeout", "%s: want a duration from %s to %s", api.FormatDuration(d),
				api.FormatDuration(config.MinRemountTimeout), api.FormatDuration(config.MaxRemountTimeout))
		}
		mc.RemountTimeout = req.RemountTimeout.D()
	}
	if req.MaxRemountsPerHour != nil {
		if *req.MaxRemountsPerHour < 0 {
			return zero, mountwatch.Registration{}, bad("max_remounts_per_hour", "%d must not be negative", *req.MaxRemountsPerHour)
		}
		mc.MaxRemountsPerHour = *req.MaxRemountsPerHour
	}
	for _, c := range []struct {
		field string
		argv  []string
	}{{"remount_command", req.RemountCommand}, {"refresh_command", req.RefreshCommand}} {
		if len(c.argv) > 0 && c.argv[0] == "" {
			return zero, mountwatch.Registration{}, bad(c.field, "the program (first element) is empty")
		}
	}
	if req.RemountUnit != "" && len(req.RemountCommand) > 0 {
		return zero, mountwatch.Registration{}, bad("remount_command", "set remount_unit or remount_command, not both")
	}
	if req.CredentialFile != "" && !path.IsAbs(req.CredentialFile) {
		return zero, mountwatch.Registration{}, bad("credential_file", "%q must be an absolute path", req.CredentialFile)
	}
	for i, l := range req.Links {
		if !path.IsAbs(l.Path) || !path.IsAbs(l.Target) {
			return zero, mountwatch.Registration{}, bad(fmt.Sprintf("links[%d]", i), "path %q and target %q must be absolute", l.Path, l.Target)
		}
		if lp := path.Clean(l.Path); lp == p || strings.HasPrefix(lp, p+"/") {
			return zero, mountwatch.Registration{}, bad(fmt.Sprintf("links[%d].path", i), "%q lies inside the mount %q: a link into a mount must live outside it", l.Path, p)
		}
		if err := checkRegisteredPath(path.Clean(l.Path), true, cfg); err != nil {
			return zero, mountwatch.Registration{}, pathProblem(fmt.Sprintf("links[%d].path", i), err)
		}
		mc.Links = append(mc.Links, mountwatch.LinkConfig{Path: path.Clean(l.Path), Target: path.Clean(l.Target)})
	}
	reg := mountwatch.Registration{Job: req.Job, Unmount: req.Job != ""}
	if req.Unmount != nil {
		reg.Unmount = *req.Unmount
	}
	if req.CredentialExpiresAt != nil {
		if err := checkExpiry("credential_expires_at", *req.CredentialExpiresAt); err != nil {
			return zero, mountwatch.Registration{}, err
		}
		reg.CredentialExpiresAt = *req.CredentialExpiresAt
	}
	return mc, reg, nil
}

// requestFromRegistered is the registration a registered mount is saved as.
func requestFromRegistered(r mountwatch.Registered) savedMount {
	c := r.Config
	pi, pt := api.Duration(c.ProbeInterval), api.Duration(c.ProbeTimeout)
	var rt *api.Duration
	if c.RemountTimeout > 0 {
		d := api.Duration(c.RemountTimeout)
		rt = &d
	}
	req := api.MountRegistration{Name: c.Name, Path: c.Path, Required: &c.Required, ProbeInterval: &pi, ProbeTimeout: &pt, RemountTimeout: rt,
		Canary: &c.Canary, RemountUnit: c.RemountUnit, RemountCommand: c.RemountCommand, CredentialFile: c.CredentialFile,
		RefreshCommand: c.RefreshCommand, RefreshAt: &c.RefreshAt, MaxRemountsPerHour: &c.MaxRemountsPerHour, Guard: &c.Guard,
		Job: r.Reg.Job, Unmount: &r.Reg.Unmount}
	for _, l := range c.Links {
		req.Links = append(req.Links, api.LinkSpec{Path: l.Path, Target: l.Target})
	}
	if !r.Reg.CredentialExpiresAt.IsZero() {
		t := r.Reg.CredentialExpiresAt
		req.CredentialExpiresAt = &t
	}
	s := savedMount{Registration: req, RegisteredAt: r.Reg.RegisteredAt, JobKey: r.Reg.JobKey}
	if b := r.Reg.By; b != nil {
		s.RegisteredBy = &api.Registrant{UID: b.UID, GID: b.GID, Groups: b.Groups, PidNS: b.PidNS}
	}
	return s
}

// saveMounts writes the registered mounts to the state dir (OnRegistryChange). Before the
// daemon's components exist (restoring at start-up) there is nothing new to write.
func (d *Daemon) saveMounts() {
	c := d.current()
	if c == nil {
		return
	}
	d.saveMountsOf(c.mounts)
}

// restoreMounts gives the watcher built at start-up the registered mounts of the state
// file. (A reload keeps the watcher, and with it the registered mounts: Reconfigure.) A
// saved registration the watcher refuses now (its credential file became a device, a
// FIFO or too large; its path was taken by a configured mount) is quarantined with its
// reason: moved out of mounts.json into mounts-quarantined.json, shown in GET /v1/mounts,
// and never tried again at the next start (issue 21: one hostile registration used to
// crash-loop the daemon at every restart).
func (d *Daemon) restoreMounts(w *mountwatch.Watcher) {
	var saved []savedMount
	if err := d.state.Load(mountsStateDoc, &saved); err != nil {
		d.logger.Error("registered mounts not restored", "err", err)
		return
	}
	var earlier []quarantinedMount
	if err := d.state.Load(mountsQuarantineDoc, &earlier); err == nil {
		d.quarantineMu.Lock()
		d.quarantined = earlier
		d.quarantineMu.Unlock()
	}
	var bad []quarantinedMount
	for _, s := range saved {
		var by *mountwatch.Registrant
		if b := s.RegisteredBy; b != nil {
			by = &mountwatch.Registrant{UID: b.UID, GID: b.GID, Groups: b.Groups, PidNS: b.PidNS}
		} else {
			// Saved before registrants were recorded, when only root's rights existed.
			d.logger.Warn("registered mount saved without its registrant: restored as root's", "mount", s.Registration.Name)
		}
		mc, reg, err := mountFromRequestAs(s.Registration, d.opts.Config, by)
		if err == nil {
			reg.RegisteredAt, reg.By, reg.JobKey = s.RegisteredAt, by, s.JobKey
			if reg.Job != "" && reg.JobKey == "" && by != nil {
				reg.JobKey = jobs.Key(by.UID, reg.Job)
			} else if reg.Job != "" && reg.JobKey == "" {
				reg.JobKey = reg.Job
			}
			// Its job's key and cgroup as the registry names them: retieJobMounts, below
			// once the registry is loaded, else once Run has it (another sandboxd holds
			// it still). Meanwhile its commands start in the cgroup of its saved key.
			if reg.JobKey != "" && d.mountJobs != nil {
				reg.JobCgroup = d.mountJobs.cgroup(reg.JobKey)
			}
			_, err = w.Add(mc, reg)
		}
		if err != nil {
			bad = append(bad, quarantinedMount{savedMount: s, Reason: err.Error(), QuarantinedAt: d.now().UTC()})
		}
	}
	moved := registryLoaded(d.jobReg) && d.retieJobMounts(w)
	if len(bad) == 0 && !moved {
		return
	}
	if len(bad) > 0 {
		d.quarantineMounts(bad)
	}
	d.saveMountsOf(w)
}

// saveMountsOf writes the registered mounts of w to the state dir (saveMounts before the
// daemon's components exist).
func (d *Daemon) saveMountsOf(w *mountwatch.Watcher) {
	regs := w.Registered()
	out := make([]savedMount, 0, len(regs))
	for _, r := range regs {
		out = append(out, requestFromRegistered(r))
	}
	if err := d.state.Save(mountsStateDoc, out); err != nil {
		d.logger.Warn("registered mounts kept in memory only", "err", err)
	}
}
