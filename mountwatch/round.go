package mountwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
)

// outcome is the result of one probe round.
type outcome struct {
	ok       bool
	state    string // when !ok
	errno    string
	op       string
	msg      string
	duration time.Duration
	at       time.Time
}

// discover updates presence, owner and connection number of every configured mount.
// Caller holds w.mu.
func (w *Watcher) discover(entries []mountEntry) {
	for _, m := range w.mounts {
		e, ok := topmostAt(entries, m.cfg.Path)
		m.present = ok && isFUSE(e.FSType)
		if ok {
			m.entry = e
		} else {
			m.entry = mountEntry{}
		}
		if m.present {
			m.conn, m.hasConn = e.Minor, true
		}
	}
}

// otherMounts lists the FUSE mounts in entries whose mountpoint is not a configured
// mount's path. Caller holds w.mu.
func (w *Watcher) otherMounts(entries []mountEntry) []api.Mount {
	configured := map[string]bool{}
	for _, m := range w.mounts {
		configured[m.cfg.Path] = true
	}
	var others []api.Mount
	for _, e := range entries {
		if isFUSE(e.FSType) && !configured[e.MountPoint] {
			others = append(others, api.Mount{Path: e.MountPoint, FSType: e.FSType, Source: e.Source, Links: []api.Link{}})
		}
	}
	return others
}

// round runs one probe round for m: a missing mount fails at once; a probe still
// outstanding after its probe_timeout kill fails the round (with one outstanding probe
// per mount a hang would otherwise never reach two failures); a probe still within its
// timeout is waited for (a slow machine is not a failing mount); else a new probe child
// starts and its outcome arrives later.
func (w *Watcher) round(ctx context.Context, m *mount) {
	w.mu.Lock()
	present, outstanding, overdue := m.present, m.probe != nil, m.probe != nil && m.probe.isExpired()
	fstype := m.entry.FSType
	w.mu.Unlock()
	switch {
	case !present:
		msg := "not mounted"
		if fstype != "" {
			msg = "another filesystem (" + fstype + ") on the path"
		}
		w.apply(m, outcome{state: api.MountMissing, msg: msg, at: w.opts.Now()})
		return
	case overdue:
		// Past its timeout and still not answered: stuck in the mount.
		w.apply(m, w.hungOutcome(m, "the last probe is still outstanding past its probe_timeout"))
		return
	case outstanding:
		return // still within its probe_timeout: its own outcome will count
	}
	c, err := w.launchProbe(m, m.cfg.Canary, false)
	if err != nil {
		w.log.Warn("mountwatch: cannot start a probe", "mount", m.cfg.Name, "err", err)
		return
	}
	go func() {
		o := w.collect(m, c)
		if o.state == "" && !o.ok {
			return // the probe machinery failed, not the mount: logged in collect
		}
		w.apply(m, o)
	}()
}

// launchProbe sends a probe for m to the probe server of the mount's owner
// (probeserver.go) and registers it as the one outstanding probe; a goroutine clears it
// once the answer arrived.
func (w *Watcher) launchProbe(m *mount, canary, fsyncOnly bool) (*child, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.probe != nil {
		return nil, fmt.Errorf("mount %s: a probe is still outstanding", m.cfg.Name)
	}
	req := probeRequest{Path: m.cfg.Path, Canary: canary && !fsyncOnly, Fsync: fsyncOnly}
	c, err := w.servers.probe(w.opts.ProbeCommand, probeCred(m), req, m.cfg.ProbeTimeout)
	if err != nil {
		return nil, err
	}
	m.probe = c
	go func() {
		<-c.reaped
		w.mu.Lock()
		if m.probe == c {
			m.probe = nil
		}
		w.mu.Unlock()
	}()
	return c, nil
}

// probeCred is the credential to probe m as: a mount registered by a peer other than root
// is probed as that peer, with its groups (what the peer could see itself); any other as
// the mount's owner (ownerCred).
func probeCred(m *mount) *syscall.Credential {
	if by := m.by(); !by.isRoot() {
		return by.cred()
	}
	return ownerCred(m.entry)
}

// ownerCred is the credential to probe as: a FUSE mount made without allow_other denies
// every other uid, root included (FIELD-NOTES).
func ownerCred(e mountEntry) *syscall.Credential {
	if e.UserID < 0 || e.UserID == os.Geteuid() {
		return nil
	}
	gid := e.GroupID
	if gid < 0 {
		gid = e.UserID
	}
	return runas.Credential(uint32(e.UserID), uint32(gid))
}

// collect waits for a probe child (until reaped or timed out) and classifies it.
func (w *Watcher) collect(m *mount, c *child) outcome {
	if c.wait() {
		return w.hungOutcome(m, fmt.Sprintf("no answer within probe_timeout %s", api.FormatDuration(m.cfg.ProbeTimeout)))
	}
	out, dur, _ := c.result()
	o := outcome{duration: dur, at: w.opts.Now()}
	var r probeResult
	line := strings.TrimSpace(out)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil || (!r.OK && r.Op == "args") {
		w.log.Warn("mountwatch: probe child gave no result", "mount", m.cfg.Name, "output", out)
		return o
	}
	if r.OK {
		o.ok = true
		return o
	}
	o.state, o.errno, o.op, o.msg = classify(r), r.Errno, r.Op, r.Error
	return o
}

// hungOutcome is a timed-out round, corroborated by the connection's fusectl `waiting`
// count when fusectl is mounted.
func (w *Watcher) hungOutcome(m *mount, why string) outcome {
	o := outcome{state: api.MountHung, errno: "ETIMEDOUT", op: "probe", msg: why, at: w.opts.Now()}
	w.mu.Lock()
	conn, ok := m.conn, m.hasConn
	w.mu.Unlock()
	if ok {
		if b, err := os.ReadFile(filepath.Join(w.opts.FusectlDir, strconv.FormatUint(uint64(conn), 10), "waiting")); err == nil {
			o.msg += fmt.Sprintf("; %s requests waiting on the connection", strings.TrimSpace(string(b)))
		}
	}
	return o
}

// classify maps a failed probe to a state by errno (issue 5): geesefs answers expired
// credentials with EACCES, or EINVAL from a write (S3's ExpiredToken); s3fs with EPERM;
// a dead daemon gives ENOTCONN, ECONNABORTED or ENODEV; EIO and ESTALE count as dead too
// (mountpoint-s3's EIO may be credentials: remediation refreshes first when it can).
// Anything else also counts as disconnected: the mount does not work and a remount is the
// remedy left.
func classify(r probeResult) string {
	switch r.Errno {
	case "EACCES", "EPERM":
		return api.MountDenied
	case "EINVAL":
		switch r.Op {
		case "create", "write", "fsync", "close":
			return api.MountDenied
		}
	}
	return api.MountDisconnected
}

// apply records a round's outcome with the debounce: two failed rounds in a row change
// the state, one when the credential is known to be expired or before the first verdict.
func (w *Watcher) apply(m *mount, o outcome) {
	w.mu.Lock()
	if m.remounting || m.removed {
		w.mu.Unlock()
		return
	}
	if o.duration > 0 {
		m.lastProbeAt, m.lastProbeDur = o.at, o.duration.Seconds()
		w.counters.observeProbe(m.cfg.Name, o.duration.Seconds())
	}
	first := !m.probed
	m.probed = true
	var ev *transition
	if o.ok {
		m.failStreak = 0
		m.refreshTried = false
		if m.state != api.MountHealthy {
			ev = m.setState(api.MountHealthy, "", "", "", w.opts.Now())
			m.backoff, m.nextRemedy = 0, time.Time{}
			for k := range m.observedFix { // the next episode reports what it would do again
				if !strings.HasPrefix(k, "link") { // links are judged on their own, not per episode
					delete(m.observedFix, k)
				}
			}
		}
	} else {
		if o.duration == 0 && !o.at.IsZero() {
			m.lastProbeAt = o.at
		}
		m.failStreak++
		add2(w.counters.Failures, m.cfg.Name, o.state)
		need := 2
		if first || m.cred.expired(w.opts.Now()) {
			need = 1
		}
		if m.failStreak >= need {
			if m.state != o.state || m.errno != o.errno {
				ev = m.setState(o.state, o.errno, o.op, o.msg, w.opts.Now())
			} else {
				m.op, m.msg = o.op, o.msg
			}
		}
	}
	w.mu.Unlock()
	if ev != nil {
		w.emitTransition(m, ev)
	}
}

type transition struct{ from, to, errno, op, msg string }

// setState changes the state; caller holds w.mu.
func (m *mount) setState(state, errno, op, msg string, now time.Time) *transition {
	t := &transition{from: m.state, to: state, errno: errno, op: op, msg: msg}
	if m.state != state {
		m.since = now
	}
	m.state, m.errno, m.op, m.msg = state, errno, op, msg
	return t
}

func (w *Watcher) emitTransition(m *mount, t *transition) {
	msg := fmt.Sprintf("mount %s (%s) is %s", m.cfg.Name, m.cfg.Path, t.to)
	if t.errno != "" {
		msg += ": " + t.errno
		if t.op != "" {
			msg += " on " + t.op
		}
	} else if t.msg != "" {
		msg += ": " + t.msg
	}
	w.emit(api.EventMountProbe, m.cfg.Name, msg, map[string]any{"from": t.from, "to": t.to, "errno": t.errno, "op": t.op})
}

// probeAs names who m's probes run as, for events.
func probeAs(m *mount) string {
	if by := m.by(); !by.isRoot() {
		return by.String() + ", who registered it"
	}
	return "its owner"
}
