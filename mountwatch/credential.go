package mountwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// credential is what mountwatch knows of a mount's credential file. All instants are
// wall-clock (no monotonic reading): Go timers run on the monotonic clock, which stops
// while a VM is paused, so the refresh point is compared with the wall clock every tick.
type credential struct {
	known     bool
	issued    time.Time // the file's mtime
	expires   time.Time
	refreshAt time.Time
	err       string // why the file could not be read, or the last refresh failure
}

func (c credential) expired(now time.Time) bool {
	return c.known && !now.Round(0).Before(c.expires)
}

func (c credential) due(now time.Time) bool {
	return c.known && !now.Round(0).Before(c.refreshAt)
}

type fileStamp struct {
	mtime time.Time
	size  int64
}

// readCredential reads the JSON credential file ({"Expiration": RFC 3339}, the AWS
// credential_process shape) and places the refresh point at refreshAt of the lifetime
// from the file's mtime, minus up to 5% of the lifetime of jitter so that many sandboxes
// resumed together do not refresh in the same second.
func readCredential(path string, refreshAt float64) (credential, fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return credential{}, fileStamp{}, fmt.Errorf("stat credential file: %w", err)
	}
	stamp := fileStamp{mtime: st.ModTime(), size: st.Size()}
	b, err := os.ReadFile(path)
	if err != nil {
		return credential{}, stamp, fmt.Errorf("read credential file: %w", err)
	}
	var doc struct {
		Expiration string
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return credential{}, stamp, fmt.Errorf("parse credential file %s: %w", path, err)
	}
	if doc.Expiration == "" {
		return credential{}, stamp, fmt.Errorf("credential file %s has no Expiration", path)
	}
	exp, err := time.Parse(time.RFC3339, doc.Expiration)
	if err != nil {
		return credential{}, stamp, fmt.Errorf("credential file %s: Expiration: %w", path, err)
	}
	issued := st.ModTime().Round(0)
	life := exp.Sub(issued)
	at := issued
	if life > 0 {
		frac := refreshAt - rand.Float64()*0.05
		if frac < 0 {
			frac = 0
		}
		at = issued.Add(time.Duration(float64(life) * frac))
	}
	return credential{known: true, issued: issued, expires: exp.Round(0), refreshAt: at}, stamp, nil
}

// checkCredential re-reads a changed credential file and starts a refresh worker when the
// wall clock has passed the refresh point.
func (w *Watcher) checkCredential(ctx context.Context, m *mount) {
	if m.cfg.CredentialFile == "" {
		return
	}
	w.reloadCredential(m)
	now := w.opts.Now()
	w.mu.Lock()
	start := len(m.cfg.RefreshCommand) > 0 && m.cred.due(now) && !m.busy && !time.Now().Before(m.credNextTry)
	if start {
		m.busy = true
	}
	w.mu.Unlock()
	if !start {
		return
	}
	go func() {
		defer w.release(m)
		w.refresh(ctx, m, "refresh point passed")
	}()
}

// reloadCredential re-reads the file when its mtime or size changed.
func (w *Watcher) reloadCredential(m *mount) {
	st, err := os.Stat(m.cfg.CredentialFile)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && m.cred.known && st.ModTime().Equal(m.credStamp.mtime) && st.Size() == m.credStamp.size {
		return
	}
	c, stamp, err := readCredential(m.cfg.CredentialFile, m.cfg.RefreshAt)
	m.credStamp = stamp
	if err != nil {
		m.cred.err = err.Error()
		return
	}
	m.cred = c
}

func (w *Watcher) release(m *mount) {
	w.mu.Lock()
	m.busy = false
	w.mu.Unlock()
}

// refresh runs the refresh command and re-reads the file. The refresh counts as done only
// when the file now names a refresh point in the future; a failure backs off
// exponentially. The caller owns m.busy.
func (w *Watcher) refresh(ctx context.Context, m *mount, why string) (api.Action, bool) {
	act := api.Action{Source: m.cfg.Name, Path: m.cfg.CredentialFile, Kind: api.ActionCommand}
	if len(m.cfg.RefreshCommand) == 0 {
		act.Status, act.Error = api.ActionSkipped, "no refresh_command"
		return act, false
	}
	if w.observe.Load() {
		w.mu.Lock()
		w.counters.Refreshes[m.cfg.Name]["observed"]++
		m.credNextTry = time.Now().Add(w.backoffStep(&m.credBackoff))
		w.mu.Unlock()
		w.emit(api.EventCredential, m.cfg.Name, "observe mode: would run refresh_command ("+why+")", map[string]any{"command": m.cfg.RefreshCommand})
		act.Status = api.ActionObserved
		return act, false
	}
	out, err := runCommand(m.cfg.RefreshCommand, w.opts.CommandTimeout)
	if err == nil && ctx.Err() == nil {
		var c credential
		var stamp fileStamp
		c, stamp, err = readCredential(m.cfg.CredentialFile, m.cfg.RefreshAt)
		if err == nil && c.due(w.opts.Now()) {
			err = fmt.Errorf("credential file still expires at %s after the refresh", c.expires.UTC().Format(time.RFC3339))
		}
		if err == nil {
			w.mu.Lock()
			m.cred, m.credStamp, m.credBackoff, m.credNextTry = c, stamp, 0, time.Time{}
			w.counters.Refreshes[m.cfg.Name]["ok"]++
			w.mu.Unlock()
			w.emit(api.EventCredential, m.cfg.Name, fmt.Sprintf("credentials refreshed (%s); now expire at %s", why, c.expires.UTC().Format(time.RFC3339)),
				map[string]any{"result": "ok", "expires_at": c.expires, "output": out})
			act.Status = api.ActionDone
			return act, true
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = errors.New("canceled")
	}
	w.mu.Lock()
	m.cred.err = "refresh failed: " + err.Error()
	d := w.backoffStep(&m.credBackoff)
	m.credNextTry = time.Now().Add(d)
	w.counters.Refreshes[m.cfg.Name]["failed"]++
	w.mu.Unlock()
	w.emit(api.EventCredential, m.cfg.Name, fmt.Sprintf("credential refresh failed (%s), retry in %v: %v", why, d, err),
		map[string]any{"result": "failed", "error": err.Error()})
	act.Status, act.Error = api.ActionFailed, err.Error()
	return act, false
}

// backoffStep doubles *b within [RetryBase, RetryMax] and returns the new delay.
func (w *Watcher) backoffStep(b *time.Duration) time.Duration {
	switch {
	case *b <= 0:
		*b = w.opts.RetryBase
	case *b*2 > w.opts.RetryMax:
		*b = w.opts.RetryMax
	default:
		*b *= 2
	}
	return *b
}
