package daemon

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// persistRetry is how often, while the state directory refuses writes, the supervisor
// tries a small write of its own, so the condition clears soon after the disk has room
// again even when nothing else needs saving.
const persistRetry = 10 * time.Second

// persistence is the StateNotPersistent condition: true while the state directory refuses
// writes (a full disk, a read-only or vanished dir), when cooldowns, run counts and
// first-seen pids live in memory only. Each episode is one WARN line and one state event
// when it starts and one event when a write succeeds again.
type persistence struct {
	mu        sync.Mutex // guards the fields below
	cond      api.Condition
	lastProbe time.Time
	probing   bool // a retry write is under way (off the supervisor loop: fsync may be slow)
}

// watchState ties the condition to the store: at start (a dir that could not be opened
// is an episode from the start) and at every flip of a write's outcome.
func (d *Daemon) watchState() {
	if d.state.Dir() == "" {
		return // memory only by choice: nothing to warn about
	}
	d.persist.cond = api.Condition{Type: api.CondStateNotPersistent, Subject: d.state.Dir(), Since: d.now(),
		Reason: "Written", Message: fmt.Sprintf("state directory %s is in use; no write to it has failed", d.state.Dir())}
	d.state.OnPersistChange(d.persistChanged)
	if err := d.state.Err(); err != nil {
		d.persistChanged(err)
	}
}

func (d *Daemon) persistChanged(err error) {
	p := &d.persist
	now := d.now()
	p.mu.Lock()
	if (err != nil) == p.cond.Status {
		p.mu.Unlock()
		return
	}
	dir := d.state.Dir()
	p.cond.Status, p.cond.Since, p.lastProbe = err != nil, now, now
	if err != nil {
		p.cond.Reason, p.cond.Severity = "WriteFailed", api.HealthWarning
		p.cond.Message = fmt.Sprintf("state directory %s cannot be written (%v): cooldowns, run counts and first-seen pids are kept in memory only and a restart forgets them", dir, err)
	} else {
		p.cond.Reason, p.cond.Severity = "Written", ""
		p.cond.Message = fmt.Sprintf("state directory %s is written again", dir)
	}
	msg := p.cond.Message
	p.mu.Unlock()
	e := api.Event{Kind: api.EventState, Subject: dir, Message: api.CondStateNotPersistent + map[bool]string{true: " raised: ", false: " cleared: "}[err != nil] + msg,
		Fields: map[string]any{"type": api.CondStateNotPersistent, "status": err != nil}}
	if err != nil {
		d.events.Warn(e)
		return
	}
	d.events.Record(e)
}

// persistCondition is the condition as it stands.
func (d *Daemon) persistCondition() []api.Condition {
	d.persist.mu.Lock()
	defer d.persist.mu.Unlock()
	if d.persist.cond.Type == "" {
		return nil
	}
	return []api.Condition{d.persist.cond}
}

// retryPersist writes a small document of its own every persistRetry while the state
// directory refuses writes; its success clears the condition.
func (d *Daemon) retryPersist() {
	p := &d.persist
	now := d.now()
	p.mu.Lock()
	due := p.cond.Status && !p.probing && now.Sub(p.lastProbe) >= persistRetry && d.state.Dir() != ""
	if due {
		p.lastProbe, p.probing = now, true
	}
	p.mu.Unlock()
	if !due {
		return
	}
	started := d.goBackground(func() {
		d.state.Save("persistence-check", map[string]any{"at": now})
		p.mu.Lock()
		p.probing = false
		p.mu.Unlock()
	})
	if !started {
		p.mu.Lock()
		p.probing = false
		p.mu.Unlock()
	}
}
