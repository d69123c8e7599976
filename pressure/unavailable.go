package pressure

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// A watched filesystem that cannot be measured — its statfs fails (EIO, ENOENT, ESTALE,
// ENOTCONN of a FUSE server that died) or does not answer within statfs_timeout — has no
// verdict about its space: FilesystemUnavailable says so, critical, with the errno, since
// when and the last good sample. It clears as soon as statfs answers again (it is a
// state, like MountUnavailable, not a pressure signal that could flap), and exists only
// for a filesystem that has failed at least once.

// Reasons of FilesystemUnavailable.
const (
	ReasonStatfsFailed = "StatfsFailed"
	ReasonStatfsHung   = "StatfsHung"
	ReasonMeasured     = "Measured"
)

// failed marks fs's last sample as the failure err that began at started; caller holds w.mu.
func (w *Watcher) failed(fs *fsState, err error, started time.Time) (api.Event, bool) {
	if fs.fig.ErrorSince == nil {
		since := started
		fs.fig.ErrorSince = &since
		w.opts.Logger.Warn("statfs fails; serving no verdict for this filesystem", "path", fs.cfg.Path, "err", err)
	}
	fs.sampled, fs.fig.Error, fs.fig.Errno, fs.fig.Stale = true, err.Error(), errnoName(err), false
	return w.unavailable(fs, ReasonStatfsFailed)
}

// hung marks fs stale: a call outstanding since started has not answered; caller holds w.mu.
func (w *Watcher) hung(fs *fsState, started time.Time) (api.Event, bool) {
	if fs.fig.ErrorSince == nil {
		since := started
		fs.fig.ErrorSince = &since
	}
	fs.fig.Stale = true
	return w.unavailable(fs, ReasonStatfsHung)
}

func (w *Watcher) unavailable(fs *fsState, reason string) (api.Event, bool) {
	fig := fs.fig
	if !fs.figures {
		fig.SampledAt = time.Time{} // no good sample yet
	}
	return w.conds.observe(w.opts.Now(), signal{
		typ: api.CondFilesystemUnavailable, subject: fs.cfg.Path, raw: true, now: true,
		reason: reason, message: fig.UnavailableDetail() + ": no verdict about its space until statfs answers",
		severity: sevCritical, fields: map[string]any{"errno": fig.Errno},
	})
}

// measuredAgain clears FilesystemUnavailable of a filesystem whose statfs answered; the
// caller holds the lock that guards conds.
func measuredAgain(conds *condSet, f api.Filesystem) (api.Event, bool) {
	if !conds.has(api.CondFilesystemUnavailable, f.Path) {
		return api.Event{}, false
	}
	return conds.observe(f.SampledAt, signal{
		typ: api.CondFilesystemUnavailable, subject: f.Path, now: true,
		reason: ReasonMeasured, message: f.Fingerprint() + ": statfs answers again",
	})
}

// errnoName is the symbolic name of the errno inside err ("ENOTCONN"), or "" if none.
func errnoName(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return ""
	}
	if n := unix.ErrnoName(en); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(en))
}
