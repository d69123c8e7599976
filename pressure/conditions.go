package pressure

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Severities of a true condition.
const (
	sevWarning  = "warning"
	sevCritical = "critical"
)

// condKey identifies a condition.
type condKey struct{ typ, subject string }

type condState struct {
	c        api.Condition
	lastTrue time.Time // the last time the raw signal was true (or a mark was set)
}

// condSet keeps every (type, subject) it has seen, true or false, so a condition's since
// means "in this status since" and a metric of it exists at 0 before it ever fires.
//
// Hysteresis: a raw signal turns its condition true at once; the condition clears only
// after the signal has been false continuously for the transition period (kubelet's
// evictionPressureTransitionPeriod), so it cannot flap. since changes only when the status
// flips, and every flip yields one event.
type condSet struct {
	transition time.Duration
	m          map[condKey]*condState
	order      []condKey
}

func newCondSet(transition time.Duration) *condSet {
	return &condSet{transition: transition, m: map[condKey]*condState{}}
}

// signal is one evaluation of a condition's raw signal.
type signal struct {
	typ, subject    string
	raw             bool
	reason, message string
	severity        string // of the true status
	fields          map[string]any
	now             bool // a state, not a pressure signal: clears at once, no transition period
	// answered: a reclaim that changed the disk has answered this filesystem since the
	// condition was raised (it was raised at or after raisedAfter, the previous answer):
	// a false signal then clears it at once. The transition period is for disks that
	// flap by themselves, not for a fill that reclaim fixed (issue 23).
	answered    bool
	raisedAfter time.Time
}

// observe applies s at now; it returns the event of a flip, if any.
func (cs *condSet) observe(now time.Time, s signal) (api.Event, bool) {
	k := condKey{s.typ, s.subject}
	st, ok := cs.m[k]
	if !ok {
		st = &condState{c: api.Condition{Type: s.typ, Subject: s.subject, Since: now}}
		cs.m[k] = st
		cs.order = append(cs.order, k)
	}
	switch {
	case s.raw:
		st.lastTrue = now
		st.c.Reason, st.c.Message, st.c.Severity = s.reason, s.message, s.severity
		if st.c.Status {
			return api.Event{}, false
		}
		st.c.Status, st.c.Since = true, now
	case st.c.Status && !s.now && now.Sub(st.lastTrue) < cs.transition && !(s.answered && !st.c.Since.Before(s.raisedAfter)):
		// Holding: the true reason stays, the message says what this sample shows and
		// when the condition clears, so it never reads a figure that is no longer so.
		st.c.Message = fmt.Sprintf("%s; clears at %s unless it falls below again (health.transition_period %s)",
			s.message, st.lastTrue.Add(cs.transition).UTC().Format("15:04:05"), shortDuration(cs.transition))
		return api.Event{}, false
	default:
		st.c.Reason, st.c.Message, st.c.Severity = s.reason, s.message, ""
		if !st.c.Status {
			return api.Event{}, false
		}
		st.c.Status, st.c.Since = false, now
	}
	fields := map[string]any{"type": s.typ, "status": st.c.Status, "reason": st.c.Reason}
	if st.c.Severity != "" {
		fields["severity"] = st.c.Severity
	}
	for k, v := range s.fields {
		fields[k] = v
	}
	word := "cleared"
	if st.c.Status {
		word = "raised"
	}
	return api.Event{
		Time:    now,
		Kind:    api.EventCondition,
		Subject: s.subject,
		Message: fmt.Sprintf("%s %s: %s", s.typ, word, st.c.Message),
		Fields:  fields,
	}, true
}

// list returns a copy of every condition in first-seen order.
func (cs *condSet) list() []api.Condition {
	out := make([]api.Condition, 0, len(cs.order))
	for _, k := range cs.order {
		out = append(out, cs.m[k].c)
	}
	return out
}

// forget drops every condition about subject (a filesystem no longer watched).
func (cs *condSet) forget(subject string) {
	order := cs.order[:0]
	for _, k := range cs.order {
		if k.subject == subject {
			delete(cs.m, k)
			continue
		}
		order = append(order, k)
	}
	cs.order = order
}

// activeSubjects returns the subjects of conditions that are true.
func (cs *condSet) activeSubjects() map[string]bool {
	out := map[string]bool{}
	for _, k := range cs.order {
		if cs.m[k].c.Status {
			out[k.subject] = true
		}
	}
	return out
}

// has reports whether the condition (typ, subject) has been seen.
func (cs *condSet) has(typ, subject string) bool {
	_, ok := cs.m[condKey{typ, subject}]
	return ok
}

// anyTrue reports whether a condition about subject is true.
func (cs *condSet) anyTrue(subject string) bool {
	for _, k := range cs.order {
		if k.subject == subject && cs.m[k].c.Status {
			return true
		}
	}
	return false
}

// pressureStates returns the states of pressureTypes about subject (ok false: not all
// seen yet). They stay valid until forget(subject).
func (cs *condSet) pressureStates(subject string) (out [4]*condState, ok bool) {
	for i, typ := range pressureTypes {
		if out[i] = cs.m[condKey{typ, subject}]; out[i] == nil {
			return out, false
		}
	}
	return out, true
}

// wouldFlip reports whether observing raws (the raw signals of the states sts, from
// pressureStates) at now would flip any of them.
func (cs *condSet) wouldFlip(now time.Time, sts *[4]*condState, raws [4]bool) bool {
	for i, st := range sts {
		switch {
		case raws[i] && !st.c.Status:
			return true
		case !raws[i] && st.c.Status && now.Sub(st.lastTrue) >= cs.transition:
			return true
		}
	}
	return false
}

// touch records that the true signals among raws were true at now, as observe does,
// leaving messages as they are.
func touch(now time.Time, sts *[4]*condState, raws [4]bool) {
	for i, st := range sts {
		if raws[i] {
			st.lastTrue = now
		}
	}
}
