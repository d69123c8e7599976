package mountwatch

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"golang.org/x/sys/unix"
)

// remount replaces the mount: fsync the root (in a child, with timeout) while the daemon
// may still hold unflushed writes → lazily detach what is left on the path (a dead mount
// left there makes the new one fail with ENOTCONN) → restart remount_unit or run
// remount_command → wait for a new mountinfo entry → canary → rebuild links. The hourly
// limit and the backoff keep a mount that cannot come back from remount loops.
func (w *Watcher) remount(ctx context.Context, m *mount, from string) bool {
	name := m.cfg.Name
	w.mu.Lock()
	now := time.Now()
	kept := m.remountTimes[:0]
	for _, t := range m.remountTimes {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	m.remountTimes = kept
	limited := len(kept) >= m.cfg.MaxRemountsPerHour
	w.mu.Unlock()
	if w.observe.Load() {
		w.count(m, "observed")
		w.emit(api.EventRemount, name, fmt.Sprintf("observe mode: would remount %s (%s) from state %s", name, m.cfg.Path, from), map[string]any{"result": "observed"})
		return false
	}
	if limited {
		w.count(m, "skipped")
		w.emit(api.EventRemount, name, fmt.Sprintf("remount of %s skipped: max_remounts_per_hour (%d) reached", name, m.cfg.MaxRemountsPerHour), map[string]any{"result": "skipped"})
		return false
	}
	w.mu.Lock()
	m.remountTimes = append(m.remountTimes, now)
	m.remounting = true
	old, wasPresent := m.entry, m.present
	// Kept so that a failed remount restores why and since when the mount is down: the
	// launch refusal and the status must still name the errno of the episode.
	prevErrno, prevOp, prevMsg, prevSince := m.errno, m.op, m.msg, m.since
	ev := m.setState(api.MountRemounting, "", "", "", w.opts.Now())
	w.mu.Unlock()
	w.emitTransition(m, ev)
	err := w.doRemount(ctx, m, from, old, wasPresent)
	if err != nil {
		w.mu.Lock()
		m.remounting = false
		m.remounts++
		w.mu.Unlock()
		w.count(m, "failed")
		w.mu.Lock()
		ev := m.setState(from, prevErrno, prevOp, prevMsg, w.opts.Now())
		m.since = prevSince
		m.failStreak = 0
		m.nextProbe = time.Time{}
		w.mu.Unlock()
		w.emitTransition(m, ev)
		w.emit(api.EventRemount, name, fmt.Sprintf("remount of %s failed: %v", name, err), map[string]any{"result": "failed", "error": err.Error()})
		return false
	}
	w.count(m, "ok")
	w.emit(api.EventRemount, name, fmt.Sprintf("remounted %s (%s), was %s", name, m.cfg.Path, from), map[string]any{"result": "ok"})
	w.verifyLinks(m)
	return true
}

func (w *Watcher) count(m *mount, result string) {
	w.mu.Lock()
	add2(w.counters.Remounts, m.cfg.Name, result)
	w.mu.Unlock()
}

func (w *Watcher) doRemount(ctx context.Context, m *mount, from string, old mountEntry, wasPresent bool) error {
	name, path := m.cfg.Name, m.cfg.Path
	if wasPresent && from == api.MountDenied {
		// The daemon is alive: let it flush pending uploads before it is stopped.
		if c, err := w.launchProbe(m, false, true); err == nil {
			if o := w.collect(m, c); !o.ok {
				w.emit(api.EventRemount, name, fmt.Sprintf("fsync of the mount root failed (%s %s); remounting anyway", o.state, o.errno), nil)
			}
		}
	}
	oldID := -1 // after a successful detach, any FUSE mount on the path is the new one (IDs are reused)
	if wasPresent {
		oldID = old.MountID
		if err := w.detach(path, m.by()); err != nil {
			w.emit(api.EventRemount, name, fmt.Sprintf("lazy unmount of %s: %v", path, err), nil)
		} else {
			oldID = -1
			w.emit(api.EventRemount, name, fmt.Sprintf("lazily unmounted the old mount on %s", path), map[string]any{"mount_id": old.MountID})
		}
	}
	w.maybeGuard(m)
	w.mu.Lock()
	removed := m.removed
	w.mu.Unlock()
	if removed { // released meanwhile: a new FUSE daemon now would outlive its session
		return fmt.Errorf("mount %s was released during the remount", name)
	}
	timeout := m.cfg.RemountTimeout
	if timeout <= 0 {
		timeout = w.opts.CommandTimeout
	}
	deadline := time.Now().Add(timeout)
	var server *child // the remount command, while it runs
	if m.cfg.RemountUnit != "" {
		if w.opts.Restarter == nil {
			return fmt.Errorf("restart %s: no systemd connection", m.cfg.RemountUnit)
		}
		cctx, cancel := context.WithDeadline(ctx, deadline)
		res, err := w.opts.Restarter.RestartUnit(cctx, m.cfg.RemountUnit)
		cancel()
		if err != nil {
			return fmt.Errorf("restart %s: %w", m.cfg.RemountUnit, err)
		}
		if res != "done" {
			return fmt.Errorf("restart %s: job %s", m.cfg.RemountUnit, res)
		}
		w.emit(api.EventRemount, name, "restarted unit "+m.cfg.RemountUnit, map[string]any{"unit": m.cfg.RemountUnit})
	} else {
		run, env := callerArgv(m.cfg.RemountCommand, m.by().cred(), m.reg != nil)
		c, err := startChildIn(run, m.by().cred(), timeout, env, w.jobCgroup(m))
		if err != nil {
			return fmt.Errorf("remount_command: %w", err)
		}
		server = c
	}
	o, err := w.untilHealthy(ctx, m, oldID, server, deadline, timeout)
	if err != nil {
		return err
	}
	if m.cfg.CredentialFile != "" {
		w.reloadCredential(m) // a restart usually comes with fresh credentials
	} else {
		w.forgetStaleExpiry(m)
	}
	// Counted before the healthy probe is applied: a status that shows the mount healthy
	// again shows the remount that did it (TestDisconnectedRemount read healthy with
	// remounts_total 0 in between).
	w.mu.Lock()
	m.remounting = false
	m.remounts++
	w.mu.Unlock()
	w.apply(m, o)
	return nil
}

// detach lazily unmounts the topmost mount on path: `umount -l` without path
// canonicalisation (which would stat the dead mount's root), the syscall if umount is absent.
// For a mount registered by a peer other than root, only what that peer could do:
// `fusermount3 -u -z` as the peer (which unmounts only the peer's own FUSE mounts).
func (w *Watcher) detach(path string, by *Registrant) error {
	if !by.isRoot() {
		argv, err := tool("fusermount3", "-u", "-z", path)
		if err != nil {
			return err
		}
		_, err = runCommand(argv, by.cred(), w.opts.CommandTimeout, by.cred() != nil)
		return err
	}
	if bin, err := exec.LookPath("umount"); err == nil {
		_, err := runCommand([]string{bin, "-l", "-c", path}, nil, w.opts.CommandTimeout, false)
		if err != nil && strings.Contains(err.Error(), "not mounted") {
			return nil
		}
		return err
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("umount2 %s: %w", path, err)
	}
	return nil
}

// untilHealthy waits, until deadline, for the first healthy probe of a new FUSE mount on
// the path (not oldID; -1: any) and returns it. It does not wait for the remount command
// (server) to exit: `rclone mount` without --daemon keeps running as the mount's server,
// and one with --daemon may linger. A command that exits with an error before the mount
// answers fails the remount at once; one that exits cleanly (it daemonized) leaves the
// wait to the mount; one still running when the mount answers is kept running (its
// timeout disarmed) and reaped when it exits. A deadline or ctx (a release) that ends the
// wait kills the command's process group. Launches resume with the first healthy probe:
// the caller applies it at once.
func (w *Watcher) untilHealthy(ctx context.Context, m *mount, oldID int, server *child, deadline time.Time, timeout time.Duration) (outcome, error) {
	name := m.cfg.Name
	stop := func() {
		if server != nil && !server.exited() {
			server.kill()
		}
	}
	last := "no new FUSE mount appeared on " + m.cfg.Path
	for {
		if server != nil && server.exited() && !server.isExpired() {
			out, _, err := server.result()
			if err != nil {
				_ = out // its output may carry secrets: only the first line of stderr, redacted
				return outcome{}, fmt.Errorf("remount_command %s exited before the mount answered: %w: %s",
					strings.Join(redactArgv(m.cfg.RemountCommand), " "), err, redact(firstLine(server.errOut.String())))
			}
			w.emit(api.EventCommand, name, "ran remount_command", map[string]any{"command": redactArgv(m.cfg.RemountCommand)})
			server = nil // it daemonized: the mount is what is waited for now
		}
		entries, _ := readMountinfo(w.opts.ProcRoot)
		if e, ok := topmostAt(entries, m.cfg.Path); ok && isFUSE(e.FSType) && e.MountID != oldID {
			w.mu.Lock()
			m.entry, m.present, m.conn, m.hasConn = e, true, e.Minor, true
			w.mu.Unlock()
			o := w.probeNow(m, true)
			if o.ok {
				if server != nil && !server.exited() && server.keep() {
					w.emit(api.EventCommand, name, fmt.Sprintf("remount_command is still running (pid %d): kept as the mount's server", server.pid),
						map[string]any{"command": redactArgv(m.cfg.RemountCommand), "pid": server.pid})
				}
				return o, nil
			}
			last = fmt.Sprintf("canary after remount: %s %s on %s", o.state, o.errno, o.op)
		}
		if time.Now().After(deadline) {
			stop()
			return outcome{}, fmt.Errorf("%s within remount_timeout %s", last, api.FormatDuration(timeout))
		}
		select {
		case <-ctx.Done():
			stop()
			return outcome{}, fmt.Errorf("remount of %s stopped: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// forgetStaleExpiry drops a pushed expiry that has passed once a remount made the mount
// work again: the mount now runs on credentials whose expiry sandboxd was not told, and
// status must not show the old one (the runner pushes the new one with PUT).
func (w *Watcher) forgetStaleExpiry(m *mount) {
	w.mu.Lock()
	stale := m.cred.pushed && m.cred.expired(w.opts.Now())
	if stale {
		m.cred = credential{err: "expiry unknown since the remount: push it with PUT /v1/mounts/" + m.cfg.Name + "/credentials"}
		m.credExpiredSeen = false
	}
	registered := m.reg != nil
	w.mu.Unlock()
	if stale && registered {
		w.changed()
	}
}
