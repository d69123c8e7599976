package mountwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
)

// Release stops watching a registered mount and removes its links; with unmount it also
// syncs and unmounts it: `umount` first, `fusermount3 -u` next, a lazy `umount -l` only as
// the last resort, so that no session leaves a FUSE daemon behind. Every step is an event.
// unmountOpt nil takes the registration's unmount setting. Configured mounts are not
// released (ErrConfigured). why names the cause for the events
// ("DELETE", "job a1b2 ended: lease_expired").
func (w *Watcher) Release(ctx context.Context, name string, unmountOpt *bool, why string) (v api.Mount, steps []api.ReleaseStep, unmounted bool, err error) {
	w.mu.Lock()
	m := w.find(name)
	switch {
	case m == nil:
		w.mu.Unlock()
		return api.Mount{}, nil, false, fmt.Errorf("mount %q: %w", name, ErrUnknown)
	case m.reg == nil:
		w.mu.Unlock()
		return api.Mount{}, nil, false, fmt.Errorf("mount %q is configured in [[mount]]: %w; remove it from the config file and reload", name, ErrConfigured)
	}
	unmount := m.reg.Unmount
	if unmountOpt != nil {
		unmount = *unmountOpt
	}
	m.removed = true
	if m.cancelRemedy != nil {
		m.cancelRemedy() // a remount in flight stops now; waitIdle then waits only for it to wind up
	}
	kept := w.mounts[:0:0]
	for _, x := range w.mounts {
		if x != m {
			kept = append(kept, x)
		}
	}
	w.mounts = kept
	w.mu.Unlock()
	w.changed()

	r := releaser{w: w, m: m}
	r.waitIdle(ctx)
	r.removeLinks()
	if unmount {
		r.unmount(ctx)
	}
	r.liftGuard()

	w.mu.Lock()
	v = m.view()
	w.counters.forget(name)
	w.mu.Unlock()
	msg := fmt.Sprintf("released mount %s (%s): %s", name, m.cfg.Path, why)
	if unmount {
		msg += "; " + r.outcome()
	} else {
		msg += "; left mounted"
	}
	w.emit(api.EventMountRegistry, name, msg, map[string]any{"why": why, "unmount": unmount, "steps": r.steps})
	return v, r.steps, unmount && r.gone, nil
}

type releaser struct {
	w       *Watcher
	m       *mount
	steps   []api.ReleaseStep
	gone    bool // this release unmounted it
	nothing bool // nothing FUSE was mounted on the path to unmount
}

func (r *releaser) step(step, result, detail string) {
	r.steps = append(r.steps, api.ReleaseStep{Step: step, Result: result, Detail: detail})
	r.w.emit(api.EventMountRegistry, r.m.cfg.Name, fmt.Sprintf("release %s: %s %s: %s", r.m.cfg.Name, step, result, detail),
		map[string]any{"step": step, "result": result})
}

func (r *releaser) outcome() string {
	switch {
	case r.gone:
		return "unmounted"
	case r.nothing:
		return "nothing was mounted there"
	}
	return "NOT unmounted (see the steps)"
}

// waitIdle waits for a refresh or remount worker of the mount to finish (a remount that
// ran after the unmount would leave a new FUSE daemon behind; doRemount checks removed)
// and for its outstanding probe child.
func (r *releaser) waitIdle(ctx context.Context) {
	deadline := time.Now().Add(r.w.opts.CommandTimeout)
	probeDeadline := time.Now().Add(r.m.cfg.ProbeTimeout + time.Second)
	for {
		r.w.mu.Lock()
		busy := r.m.busy
		// An outstanding probe child holds the mount busy for umount; one stuck in a hung
		// mount is freed by the abort in unmount, so it is waited for only so long.
		probing := r.m.probe != nil && time.Now().Before(probeDeadline)
		r.w.mu.Unlock()
		if !busy && !probing {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.step("wait", "failed", "a refresh or remount of the mount is still running")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeLinks removes each link that is still the symlink sandboxd made; anything else at
// the link's path (data, another link) is left alone.
func (r *releaser) removeLinks() {
	by := r.m.by()
	for _, l := range r.m.cfg.Links {
		state, detail := inspectLinkAs(by, l)
		switch {
		case r.w.opts.Observe:
			r.step("links", "observed", "would remove "+l.Path)
		case state == LinkOK:
			if err := runas.AsFS(by.cred(), func() error { return removeOwnLink(l) }); err != nil {
				r.step("links", "failed", fmt.Sprintf("remove %s: %v", l.Path, err))
			} else {
				r.step("links", "done", "removed "+l.Path+" -> "+l.Target)
			}
		case state == LinkMissing:
			r.step("links", "skipped", l.Path+" is already gone")
		default:
			r.step("links", "skipped", fmt.Sprintf("%s is not the link sandboxd made (%s %s): left alone", l.Path, state, detail))
		}
	}
}

// unmount syncs and unmounts the FUSE mount on the path. A non-FUSE filesystem on the path
// is never unmounted.
func (r *releaser) unmount(ctx context.Context) {
	w, m := r.w, r.m
	path := m.cfg.Path
	e, ok := w.fuseAt(path)
	if !ok {
		r.nothing = true
		r.step("umount", "skipped", "no FUSE mount on "+path)
		return
	}
	if w.opts.Observe {
		r.step("umount", "observed", "would sync and unmount "+path)
		return
	}
	// umount resolves the path again: a directory of it swapped for a symlink since the
	// registration would point it at another mount. (Only the parent is resolved: the
	// mount's own root may hang.)
	if dir := filepath.Dir(path); !sameResolved(dir) {
		r.step("umount", "failed", fmt.Sprintf("%s is no longer reached without a symlink: not unmounting %s", dir, path))
		return
	}
	w.mu.Lock()
	m.entry, m.present, m.conn, m.hasConn = e, true, e.Minor, true
	hung := m.state == api.MountHung
	w.mu.Unlock()
	if hung {
		// Callers stuck in a hung request keep the mount busy; only an abort frees them.
		w.abort(m)
		r.step("abort", "done", "aborted the hung connection "+strconv.FormatUint(uint64(e.Minor), 10))
	} else if c, err := w.launchProbe(m, false, true); err != nil {
		r.step("sync", "failed", err.Error())
	} else if o := w.collect(m, c); o.ok {
		r.step("sync", "done", "fsync of "+path+" as "+probeAs(m))
	} else {
		r.step("sync", "failed", fmt.Sprintf("fsync of %s: %s %s", path, o.state, o.errno))
	}
	// A mount registered by a peer other than root is unmounted only as that peer could:
	// fusermount3 -u (and -u -z last) as the peer, which unmounts only the peer's own FUSE
	// mounts; umount and umount -l are root's, and skipped.
	by := m.by()
	rootOnly := func(name string, args ...string) func() ([]string, error) {
		return func() ([]string, error) {
			if !by.isRoot() {
				return nil, fmt.Errorf("a root-only step, and the mount was registered by %s", by)
			}
			return tool(name, args...)
		}
	}
	tries := []struct {
		step string
		argv func() ([]string, error)
	}{
		{"umount", rootOnly("umount", "-c", path)},
		{"fusermount3", func() ([]string, error) { return tool("fusermount3", "-u", path) }},
		{"umount_lazy", rootOnly("umount", "-l", "-c", path)},
	}
	if !by.isRoot() {
		tries = append(tries, struct {
			step string
			argv func() ([]string, error)
		}{"fusermount3_lazy", func() ([]string, error) { return tool("fusermount3", "-u", "-z", path) }})
	}
	for _, t := range tries {
		argv, err := t.argv()
		if err != nil {
			r.step(t.step, "skipped", err.Error())
			continue
		}
		_, err = runCommand(argv, by.cred(), w.opts.CommandTimeout, by.cred() != nil)
		if !w.mountIDPresent(e.MountID) {
			r.gone = true
			r.step(t.step, "done", "unmounted "+path)
			return
		}
		detail := "still mounted"
		if err != nil {
			detail = err.Error()
		}
		r.step(t.step, "failed", detail)
	}
}

// sameResolved reports whether dir resolves to itself, following no symlink.
func sameResolved(dir string) bool {
	real, err := filepath.EvalSymlinks(dir)
	return err == nil && real == dir
}

// mountIDPresent reports whether mountinfo still lists the mount with this ID.
func (w *Watcher) mountIDPresent(id int) bool {
	entries, _ := readMountinfo(w.opts.ProcRoot)
	for _, e := range entries {
		if e.MountID == id {
			return true
		}
	}
	return false
}

// fuseAt is the topmost mountinfo entry at path when it is a FUSE mount.
func (w *Watcher) fuseAt(path string) (mountEntry, bool) {
	entries, _ := readMountinfo(w.opts.ProcRoot)
	e, ok := topmostAt(entries, path)
	return e, ok && isFUSE(e.FSType)
}

// tool is argv for a system tool found in PATH.
func tool(name string, args ...string) ([]string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s not installed", name)
	}
	return append([]string{bin}, args...), nil
}

// liftGuard clears the immutable flag the guard set on the bare mountpoint: a released
// session's directory must be removable by the runner.
func (r *releaser) liftGuard() {
	r.w.mu.Lock()
	guarded := r.m.guarded
	r.w.mu.Unlock()
	if !guarded {
		return
	}
	if _, mounted := r.w.fuseAt(r.m.cfg.Path); mounted {
		r.step("guard", "skipped", "still mounted: the bare directory beneath keeps its immutable flag")
		return
	}
	if _, err := setImmutable(r.m.cfg.Path, false); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.step("guard", "failed", err.Error())
		return
	}
	r.step("guard", "done", "lifted the immutable flag of "+filepath.Clean(r.m.cfg.Path))
}
