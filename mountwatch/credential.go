package mountwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
)

// credential is what mountwatch knows of a mount's credential file. All instants are
// wall-clock (no monotonic reading): Go timers run on the monotonic clock, which stops
// while a VM is paused, so the refresh point is compared with the wall clock every tick.
type credential struct {
	known  bool
	pushed bool // from PUT .../credentials, a registration, or a refresh_command's output

	issued    time.Time // the file's mtime, or when the expiry was pushed
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
	b, stamp, err := readBounded(path)
	if err != nil {
		return credential{}, stamp, err
	}
	var doc struct {
		Expiration string
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return credential{}, stamp, fmt.Errorf("parse credential file %s: %w (%w)", path, err, ErrCredentialFile)
	}
	if doc.Expiration == "" {
		return credential{}, stamp, fmt.Errorf("credential file %s has no Expiration: %w", path, ErrCredentialFile)
	}
	exp, err := time.Parse(time.RFC3339, doc.Expiration)
	if err != nil {
		return credential{}, stamp, fmt.Errorf("credential file %s: Expiration: %w (%w)", path, err, ErrCredentialFile)
	}
	return lifetime(stamp.mtime, exp, refreshAt), stamp, nil
}

// readCredentialAs reads the credential file with by's filesystem credentials: the peer
// that registered a mount learns nothing of a file it could not read itself.
func readCredentialAs(by *Registrant, path string, refreshAt float64) (c credential, stamp fileStamp, err error) {
	if aerr := runas.AsFS(by.cred(), func() error { c, stamp, err = readCredential(path, refreshAt); return nil }); aerr != nil {
		return credential{}, fileStamp{}, aerr
	}
	return c, stamp, err
}

// lifetime is a credential issued at issued that expires at exp, with its refresh point at
// refreshAt of the lifetime minus up to 5% of jitter.
func lifetime(issued, exp time.Time, refreshAt float64) credential {
	issued = issued.Round(0)
	life := exp.Sub(issued)
	at := issued
	if life > 0 {
		frac := refreshAt - rand.Float64()*0.05
		if frac < 0 {
			frac = 0
		}
		at = issued.Add(time.Duration(float64(life) * frac))
	}
	return credential{known: true, issued: issued, expires: exp.Round(0), refreshAt: at}
}

// pushedCredential is a credential whose expiry the runner told sandboxd at now (a
// registration's credential_expires_at, PUT .../credentials): its lifetime counts from now.
func pushedCredential(now, exp time.Time, refreshAt float64) credential {
	c := lifetime(now, exp, refreshAt)
	c.pushed = true
	return c
}

// parseExpiration finds the expiry in a refresh_command's output: the last line that is a
// JSON object with "Expiration" (the AWS credential_process shape).
func parseExpiration(out string) (time.Time, bool) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var doc struct{ Expiration string }
		if json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &doc) == nil && doc.Expiration != "" {
			if t, err := time.Parse(time.RFC3339, doc.Expiration); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// checkCredential re-reads a changed credential file and starts a refresh worker when the
// wall clock has passed the refresh point.
func (w *Watcher) checkCredential(ctx context.Context, m *mount) {
	if m.cfg.CredentialFile != "" {
		w.reloadCredential(m)
	}
	now := w.opts.Now()
	w.mu.Lock()
	start := len(m.cfg.RefreshCommand) > 0 && m.cred.due(now) && !m.busy && !time.Now().Before(m.credNextTry)
	if start {
		m.busy = true
	}
	expired := m.cred.expired(now) && !m.credExpiredSeen
	if expired {
		// The runner learns it from the CredentialExpired condition before any caller sees
		// EACCES; probing now makes the verdict (and the remount) follow within a probe.
		m.credExpiredSeen = true
		m.nextProbe = time.Time{}
	}
	exp := m.cred.expires
	w.mu.Unlock()
	if expired {
		w.emit(api.EventCredential, m.cfg.Name, fmt.Sprintf("credential of mount %s expired at %s without a refresh (CredentialExpired)",
			m.cfg.Name, exp.UTC().Format(time.RFC3339)), map[string]any{"result": "expired", "expires_at": exp.UTC()})
	}
	if !start {
		return
	}
	go func() {
		defer w.release(m)
		w.refresh(ctx, m, "refresh point passed")
	}()
}

// reloadCredential re-reads the file when its mtime or size changed. The stat and the
// read run off w.mu (a lock every endpoint needs) and within credentialReadTimeout; while
// one is still outstanding (a hung filesystem) no other starts.
func (w *Watcher) reloadCredential(m *mount) {
	w.mu.Lock()
	if m.credReading {
		w.mu.Unlock()
		return
	}
	m.credReading = true
	by, path, refreshAt := m.by(), m.cfg.CredentialFile, m.cfg.RefreshAt
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var st os.FileInfo
		serr := runas.AsFS(by.cred(), func() (err error) { st, err = os.Stat(path); return err })
		w.mu.Lock()
		unchanged := serr == nil && m.cred.known && st.ModTime().Equal(m.credStamp.mtime) && st.Size() == m.credStamp.size
		w.mu.Unlock()
		var c credential
		var stamp fileStamp
		var err error
		if !unchanged {
			c, stamp, err = readCredentialAs(by, path, refreshAt)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		m.credReading = false
		if unchanged {
			return
		}
		m.credStamp = stamp
		if err != nil {
			m.cred.err = err.Error()
			return
		}
		m.cred = c
	}()
	t := time.NewTimer(credentialReadTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.mu.Lock()
		m.cred.err = fmt.Sprintf("credential file %s: no answer within %s (a hung filesystem?)", path, credentialReadTimeout)
		w.mu.Unlock()
	}
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
		add2(w.counters.Refreshes, m.cfg.Name, "observed")
		m.credNextTry = time.Now().Add(w.backoffStep(&m.credBackoff))
		w.mu.Unlock()
		w.emit(api.EventCredential, m.cfg.Name, "observe mode: would run refresh_command ("+why+")", map[string]any{"command": redactArgv(m.cfg.RefreshCommand)})
		act.Status = api.ActionObserved
		return act, false
	}
	out, err := runCommandIn(m.cfg.RefreshCommand, m.by().cred(), w.opts.CommandTimeout, m.reg != nil, w.jobCgroup(m))
	if err == nil && ctx.Err() == nil {
		var c credential
		var stamp fileStamp
		c, stamp, err = w.readRefreshed(m, out)
		if err == nil && c.due(w.opts.Now()) {
			err = fmt.Errorf("credential file still expires at %s after the refresh", c.expires.UTC().Format(time.RFC3339))
		}
		if err == nil {
			w.mu.Lock()
			m.cred, m.credBackoff, m.credNextTry, m.credExpiredSeen = c, 0, time.Time{}, false
			if m.cfg.CredentialFile != "" {
				m.credStamp = stamp
			}
			add2(w.counters.Refreshes, m.cfg.Name, "ok")
			registered := m.reg != nil
			w.mu.Unlock()
			if registered {
				w.changed()
			}
			// The output is the credential itself (credential_process): never stored.
			w.emit(api.EventCredential, m.cfg.Name, fmt.Sprintf("credentials refreshed (%s), expires at %s", why, c.expires.UTC().Format(time.RFC3339)),
				map[string]any{"result": "ok", "expires_at": c.expires})
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
	add2(w.counters.Refreshes, m.cfg.Name, "failed")
	w.mu.Unlock()
	w.emit(api.EventCredential, m.cfg.Name, fmt.Sprintf("credential refresh failed (%s), retry in %s: %v", why, api.FormatDuration(d), err),
		map[string]any{"result": "failed", "error": err.Error()})
	act.Status, act.Error = api.ActionFailed, err.Error()
	return act, false
}

// readRefreshed is the credential after a successful refresh_command: the re-read
// credential_file, or without one the Expiration the command printed.
func (w *Watcher) readRefreshed(m *mount, out string) (credential, fileStamp, error) {
	if m.cfg.CredentialFile != "" {
		return readCredentialBounded(m.by(), m.cfg.CredentialFile, m.cfg.RefreshAt)
	}
	exp, ok := parseExpiration(out)
	if !ok {
		return credential{}, fileStamp{}, fmt.Errorf("refresh_command printed no JSON line with an RFC 3339 \"Expiration\" and the mount has no credential_file: print it, or push the expiry with PUT /v1/mounts/%s/credentials", m.cfg.Name)
	}
	return pushedCredential(w.opts.Now(), exp, m.cfg.RefreshAt), fileStamp{}, nil
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
