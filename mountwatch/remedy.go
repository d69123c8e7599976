package mountwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
	"golang.org/x/sys/unix"
)

// maybeRemediate starts the remediation worker for an unhealthy mount whose backoff has
// passed and that has no worker yet.
func (w *Watcher) maybeRemediate(ctx context.Context, m *mount) {
	w.mu.Lock()
	start := m.probed && m.state != api.MountHealthy && m.state != api.MountRemounting &&
		!m.busy && !time.Now().Before(m.nextRemedy)
	var rctx context.Context
	var cancel context.CancelFunc
	if start {
		m.busy = true
		// A release cancels the worker (Release): it does not wait for a remount, and a
		// remount must not start a FUSE server for a session that has ended.
		rctx, cancel = context.WithCancel(ctx)
		m.cancelRemedy = cancel
	}
	w.mu.Unlock()
	if !start {
		return
	}
	go func() {
		defer w.release(m)
		defer func() {
			w.mu.Lock()
			m.cancelRemedy = nil
			w.mu.Unlock()
			cancel()
		}()
		if !w.remediate(rctx, m) {
			w.mu.Lock()
			m.nextRemedy = time.Now().Add(w.backoffStep(&m.backoff))
			w.mu.Unlock()
		}
	}()
}

// remediate walks the ladder once: denied (or EIO with a credential source) → refresh and
// re-probe; still failing or disconnected → remount; hung → abort the connection, then
// remount. It reports whether the mount is healthy again.
func (w *Watcher) remediate(ctx context.Context, m *mount) bool {
	w.mu.Lock()
	state, errno, tried := m.state, m.errno, m.refreshTried
	credSource := m.cfg.CredentialFile != "" || len(m.cfg.RefreshCommand) > 0
	canRemount := m.cfg.RemountUnit != "" || len(m.cfg.RemountCommand) > 0
	w.mu.Unlock()

	if (state == api.MountDenied || (state == api.MountDisconnected && errno == "EIO" && credSource)) &&
		len(m.cfg.RefreshCommand) > 0 && !tried {
		w.mu.Lock()
		m.refreshTried = true
		w.mu.Unlock()
		if _, ok := w.refresh(ctx, m, "mount is "+state); ok {
			if o := w.probeNow(m, m.cfg.Canary); o.ok {
				w.apply(m, o)
				return true
			}
		}
	}
	if !canRemount {
		// Nothing can remount it: an abort would end the FUSE server's session for good
		// (rclone exits), while a hung backend that comes back heals a mount left alone.
		// So nothing is aborted; the mount is reported and probed until it answers again.
		// (A release of a hung mount still aborts: Release, which must free its callers.)
		if w.once(m, "no-remount") {
			msg := fmt.Sprintf("mount %s is %s and neither remount_unit nor remount_command is set: left as is and probed until it answers again", m.cfg.Name, state)
			if state == api.MountHung {
				msg += "; its connection is not aborted, since nothing would remount it"
			}
			w.emit(api.EventRemount, m.cfg.Name, msg, map[string]any{"recovery": "wait"})
		}
		return false
	}
	if state == api.MountHung {
		// A remount follows: only aborting the connection frees the callers stuck in it
		// and lets the old mount be detached.
		w.abort(m)
	}
	return w.remount(ctx, m, state)
}

// once reports true the first time key is seen for m, so observe-mode and give-up events
// are not repeated every backoff.
func (w *Watcher) once(m *mount, key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.observedFix[key] {
		return false
	}
	m.observedFix[key] = true
	return true
}

// probeNow runs one probe to completion (for remediation and resume) and returns its
// outcome. With one outstanding probe per mount, a probe of the loop may still be running:
// while it is within its probe_timeout it is waited for (a slow probe child, as under
// load, is not a hung mount; treating it as one remounted healthy mounts at start-up);
// only one still there past its timeout means hung.
func (w *Watcher) probeNow(m *mount, canary bool) outcome {
	for attempt := 0; attempt < 50; attempt++ {
		c, err := w.launchProbe(m, canary, false)
		if err == nil {
			return w.collect(m, c)
		}
		w.mu.Lock()
		pending := m.probe
		w.mu.Unlock()
		if pending != nil {
			if pending.isExpired() && !closed(pending.reaped) {
				break
			}
			select {
			case <-pending.reaped:
			case <-pending.expired:
			}
		}
		time.Sleep(10 * time.Millisecond) // the reaper clears m.probe right after the reap
	}
	return w.hungOutcome(m, "the last probe is still outstanding past its probe_timeout")
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// abort frees a hung connection by writing to fusectl's abort file: SIGKILL cannot free a
// caller stuck inside a FUSE request; only aborting the connection does (FIELD-NOTES).
func (w *Watcher) abort(m *mount) {
	w.mu.Lock()
	conn, ok := m.conn, m.hasConn
	w.counters.Aborts[m.cfg.Name]++
	w.mu.Unlock()
	if !ok {
		w.emit(api.EventMountAbort, m.cfg.Name, "cannot abort: the connection number was never seen", nil)
		return
	}
	file := filepath.Join(w.opts.FusectlDir, strconv.FormatUint(uint64(conn), 10), "abort")
	if w.observe.Load() {
		w.emit(api.EventMountAbort, m.cfg.Name, "observe mode: would abort the hung connection by writing "+file, map[string]any{"connection": conn})
		return
	}
	err := w.ensureFusectl()
	if err == nil {
		// As the peer that registered the mount, if not root: fusectl's abort file belongs
		// to the connection's owner (mode 0200), so the peer aborts only its own mounts.
		err = runas.AsFS(m.by().cred(), func() error { return os.WriteFile(file, []byte("1"), 0) })
	}
	if err != nil {
		w.emit(api.EventMountAbort, m.cfg.Name, fmt.Sprintf("abort connection %d: %v", conn, err), map[string]any{"connection": conn, "error": err.Error()})
		return
	}
	w.emit(api.EventMountAbort, m.cfg.Name, fmt.Sprintf("aborted hung connection %d", conn), map[string]any{"connection": conn})
}

// ensureFusectl mounts fusectl on FusectlDir unless it is already there.
func (w *Watcher) ensureFusectl() error {
	entries, _ := readMountinfo(w.opts.ProcRoot)
	if e, ok := topmostAt(entries, filepath.Clean(w.opts.FusectlDir)); ok && e.FSType == "fusectl" {
		return nil
	}
	if err := os.MkdirAll(w.opts.FusectlDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", w.opts.FusectlDir, err)
	}
	if err := unix.Mount("fusectl", w.opts.FusectlDir, "fusectl", 0, ""); err != nil {
		return fmt.Errorf("mount fusectl on %s: %w", w.opts.FusectlDir, err)
	}
	return nil
}
