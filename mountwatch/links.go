package mountwatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// Link states in api.Link.State.
const (
	LinkOK          = "ok"
	LinkMissing     = "missing"      // nothing there (observe mode, or rebuilding failed)
	LinkEmptyFile   = "empty_file"   // an empty regular file stands in place (geesefs turns symlinks into these)
	LinkOccupied    = "occupied"     // a non-empty file, a directory or anything else: never removed
	LinkWrongTarget = "wrong_target" // a symlink to somewhere else: reported, left alone
	LinkError       = "error"
)

// verifyLinks checks every configured link with Lstat + Readlink (never following it into
// the mount) and rebuilds a missing link or one replaced by an empty regular file.
// Anything holding data is only reported.
func (w *Watcher) verifyLinks(m *mount) {
	if len(m.cfg.Links) == 0 {
		return
	}
	out := make([]api.Link, 0, len(m.cfg.Links))
	for _, l := range m.cfg.Links {
		state, detail := inspectLinkAs(m.by(), l)
		if state == LinkMissing || state == LinkEmptyFile {
			state = w.rebuildLink(m, l, state)
		} else if state != LinkOK {
			w.mu.Lock()
			w.counters.LinkProblems[m.cfg.Name]++
			w.mu.Unlock()
			if w.once(m, "link:"+l.Path+":"+state+":"+detail) {
				w.emit(api.EventLinkRepair, m.cfg.Name, fmt.Sprintf("link %s is not a symlink to %s (%s: %s): left alone", l.Path, l.Target, state, detail),
					map[string]any{"path": l.Path, "target": l.Target, "state": state})
			}
		}
		out = append(out, api.Link{Path: l.Path, Target: l.Target, State: state})
	}
	w.mu.Lock()
	m.links = out
	w.mu.Unlock()
}

// inspectLinkAs is inspectLink with by's filesystem credentials: a registrant learns
// nothing of a path it could not look at itself.
func inspectLinkAs(by *Registrant, l LinkConfig) (state, detail string) {
	if err := runas.AsFS(by.cred(), func() error { state, detail = inspectLink(l); return nil }); err != nil {
		return LinkError, err.Error()
	}
	return state, detail
}

func inspectLink(l LinkConfig) (state, detail string) {
	fi, err := os.Lstat(l.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return LinkMissing, ""
	case err != nil:
		return LinkError, err.Error()
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(l.Path)
		if err != nil {
			return LinkError, err.Error()
		}
		if t != l.Target {
			return LinkWrongTarget, "points to " + t
		}
		return LinkOK, ""
	case fi.Mode().IsRegular() && fi.Size() == 0:
		return LinkEmptyFile, ""
	case fi.Mode().IsRegular():
		return LinkOccupied, "a regular file of " + api.FormatCount(uint64(fi.Size())) + " bytes"
	case fi.IsDir():
		return LinkOccupied, "a directory"
	}
	return LinkOccupied, fi.Mode().Type().String()
}

// rebuildLink replaces a missing link or an empty file with the symlink. The empty file
// is removed only if it is still empty and still a regular file right before. Both steps
// work beneath the link's directory as safefs walked it from "/" (no symlink in any
// component, no parent another user could swap), so a swapped parent cannot turn the
// unlink or the new link into one somewhere else (issue 9).
func (w *Watcher) rebuildLink(m *mount, l LinkConfig, state string) string {
	if w.observe.Load() {
		if w.once(m, "link:"+l.Path+":"+state) {
			w.emit(api.EventLinkRepair, m.cfg.Name, fmt.Sprintf("observe mode: would rebuild link %s -> %s (%s)", l.Path, l.Target, state), map[string]any{"path": l.Path, "state": state})
		}
		return state
	}
	var occupied bool
	err := runas.AsFS(m.by().cred(), func() (err error) { occupied, err = makeLink(l, state); return err })
	if err != nil {
		return w.linkFailed(m, l, err)
	}
	if occupied {
		return LinkOccupied // it gained data, or became something else, since we looked
	}
	w.mu.Lock()
	w.counters.LinkRepairs[m.cfg.Name]++
	w.mu.Unlock()
	w.emit(api.EventLinkRepair, m.cfg.Name, fmt.Sprintf("rebuilt link %s -> %s (was %s)", l.Path, l.Target, state), map[string]any{"path": l.Path, "target": l.Target, "was": state})
	return LinkOK
}

// makeLink is rebuildLink's filesystem part; for a mount registered by a peer other than
// root it runs inside runas.AsFS with the peer's credentials, so the kernel creates the
// link (owned by the peer) and removes the empty file only where the peer could.
func makeLink(l LinkConfig, state string) (occupied bool, err error) {
	dir, base, err := safefs.OpenParent(l.Path)
	if err != nil {
		return false, err
	}
	defer dir.Close()
	if state == LinkEmptyFile {
		e, err := dir.Lstat(base)
		switch {
		case errors.Is(err, unix.ENOENT): // gone since we looked: only the link to make
		case err != nil:
			return false, err
		case e.Type != unix.S_IFREG || e.Size != 0:
			return true, nil
		default:
			if _, err := dir.RemoveFile(base); err != nil && !errors.Is(err, unix.ENOENT) {
				return false, err
			}
		}
	}
	if err := unix.Symlinkat(l.Target, dir.Fd(), base); err != nil {
		return false, fmt.Errorf("symlink %s: %w", l.Path, err)
	}
	return false, nil
}

func (w *Watcher) linkFailed(m *mount, l LinkConfig, err error) string {
	if w.once(m, "link-err:"+l.Path+":"+err.Error()) {
		w.emit(api.EventLinkRepair, m.cfg.Name, fmt.Sprintf("rebuild link %s: %v", l.Path, err), map[string]any{"path": l.Path, "error": err.Error()})
	}
	return LinkError
}
