package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// eventLogSize is how many events GET /v1/events keeps of every kind (CONTRACT §4).
const eventLogSize = 1000

// keptLogSize is how many events of the kept kinds (lifecycle, reclaim, reserve, mount,
// condition, config, state) are held besides: a flood of prunes or refusals pushes them
// out of the main ring, never out of this one.
const keptLogSize = 200

// refusalInterval is the window in which refusals of one peer on one path are one event:
// the first is recorded at once, the rest of the window as one event with their count.
const refusalInterval = 10 * time.Second

// maxRefusalKeys bounds the refusal windows kept (a path may carry an id the caller
// chose); past it, a peer's refusals are coalesced by uid alone.
const maxRefusalKeys = 1024

// kept reports whether e goes into the kept ring too: the kinds that change or report the
// sandbox's state, except a reclaim run that changed nothing on disk (a notice: the kept
// ring is for the runs that deleted, issue 23).
func kept(e api.Event) bool {
	if e.Kind == api.EventReclaimRun && e.Fields["changed"] == false {
		return false
	}
	return keptKind(e.Kind)
}

func keptKind(kind string) bool {
	switch kind {
	case api.EventLifecycle, api.EventReclaimRun, api.EventReserve, api.EventRemount, api.EventCredential,
		api.EventCondition, api.EventConfig, api.EventState:
		return true
	}
	return false
}

// eventLog is the audit trail: a ring of the last events, and a smaller one of the kinds
// that must not be pushed out; each event is also one structured log line (with its
// component and seq). Followers wait on a channel closed at every append.
type eventLog struct {
	logger *slog.Logger
	now    func() time.Time
	// onRecord, when set, is called after every append (it invalidates cached answers).
	onRecord func()

	mu       sync.Mutex // guards the fields below
	ring     []api.Event
	kept     []api.Event
	next     uint64 // sequence number of the next event (first is 1)
	notify   chan struct{}
	refusals map[string]*refusalWindow
}

// refusalWindow is one peer's refusals on one path within refusalInterval.
type refusalWindow struct {
	until     time.Time
	count     int       // refusals held back in this window
	last      api.Event // the last of them
	component string
	flushing  bool // a timer will record them at until
}

func newEventLog(logger *slog.Logger, now func() time.Time) *eventLog {
	return &eventLog{logger: logger, now: now, next: 1, notify: make(chan struct{}),
		ring: make([]api.Event, 0, 64), refusals: map[string]*refusalWindow{}}
}

// Record appends e, assigning its sequence number and time, and logs it.
func (l *eventLog) Record(e api.Event) { l.record(e, "", 0) }

// For is Record for a component: its log line names the component.
func (l *eventLog) For(component string) func(api.Event) {
	return func(e api.Event) { l.record(e, component, 0) }
}

// Error records e and logs it at ERROR (a rejected reload: one line, not two).
func (l *eventLog) Error(e api.Event) { l.record(e, "", slog.LevelError) }

// Warn records e and logs it at WARN.
func (l *eventLog) Warn(e api.Event) { l.record(e, "", slog.LevelWarn) }

func (l *eventLog) record(e api.Event, component string, level slog.Level) {
	if e.Kind == api.EventRefusal && l.holdRefusal(e, component) {
		return
	}
	l.append(e, component, level)
}

// append stores e in the rings and logs it.
func (l *eventLog) append(e api.Event, component string, level slog.Level) {
	l.mu.Lock()
	e.Seq = l.next
	l.next++
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	l.ring = push(l.ring, e, eventLogSize)
	if kept(e) {
		l.kept = push(l.kept, e, keptLogSize)
	}
	ch := l.notify
	l.notify = make(chan struct{})
	l.mu.Unlock()
	close(ch)
	if l.onRecord != nil {
		l.onRecord()
	}

	attrs := make([]any, 0, 8+2*len(e.Fields))
	if _, named := e.Fields["component"]; component != "" && !named {
		attrs = append(attrs, "component", component)
	}
	attrs = append(attrs, "seq", e.Seq, "kind", e.Kind, "subject", e.Subject)
	for k, v := range e.Fields {
		attrs = append(attrs, k, v)
	}
	if level == 0 && e.Kind == api.EventRefusal {
		level = slog.LevelWarn
	}
	l.logger.Log(context.Background(), level, e.Message, attrs...)
}

func push(ring []api.Event, e api.Event, size int) []api.Event {
	if len(ring) < size {
		return append(ring, e)
	}
	copy(ring, ring[1:])
	ring[len(ring)-1] = e
	return ring
}

// refusalKey is who was refused where: the peer's uid and the path (or subject).
func refusalKey(e api.Event) string {
	uid := "-"
	if v, ok := e.Fields["uid"]; ok {
		uid = fmt.Sprint(v)
	}
	return uid + "\x00" + e.Subject
}

// holdRefusal coalesces refusals (CONTRACT §4: any local user can call the socket): the
// first of a peer on a path in a window is recorded (and logged) at once; the others of
// the window are held and recorded as one event with their count when it ends. It
// reports whether e was held.
func (l *eventLog) holdRefusal(e api.Event, component string) bool {
	now := l.now()
	k := refusalKey(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.refusals) >= maxRefusalKeys {
		for key, w := range l.refusals {
			if !w.flushing && !now.Before(w.until) {
				delete(l.refusals, key)
			}
		}
		if _, ok := l.refusals[k]; !ok && len(l.refusals) >= maxRefusalKeys {
			k = fmt.Sprint(e.Fields["uid"]) + "\x00*" // too many paths: by uid alone
		}
	}
	w := l.refusals[k]
	if w == nil || !now.Before(w.until) {
		l.refusals[k] = &refusalWindow{until: now.Add(refusalInterval)}
		return false
	}
	w.count++
	w.last, w.component = e, component
	if !w.flushing {
		w.flushing = true
		time.AfterFunc(w.until.Sub(now), func() { l.flushRefusals(k) })
	}
	return true
}

// flushRefusals records the refusals a window held back as one event, and opens the next
// window, so a steady flood is one event per interval.
func (l *eventLog) flushRefusals(k string) {
	l.mu.Lock()
	w := l.refusals[k]
	if w == nil || w.count == 0 {
		delete(l.refusals, k)
		l.mu.Unlock()
		return
	}
	e, n, component := w.last, w.count, w.component
	l.refusals[k] = &refusalWindow{until: l.now().Add(refusalInterval)}
	l.mu.Unlock()
	fields := make(map[string]any, len(e.Fields)+2)
	for f, v := range e.Fields {
		fields[f] = v
	}
	fields["count"], fields["coalesced"] = n, true
	e.Fields, e.Time, e.Seq = fields, time.Time{}, 0
	e.Message = fmt.Sprintf("%s more like this within %s; the last: %s", api.FormatCount(uint64(n)), api.FormatDuration(refusalInterval), e.Message)
	l.append(e, component, 0)
}

// Since returns the kept events with Seq > since (both rings, in order), the last
// sequence number, whether events after since are missing from them, and a channel
// closed at the next append.
func (l *eventLog) Since(since uint64) (events []api.Event, next uint64, dropped bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	events = []api.Event{}
	i, j := 0, 0
	for i < len(l.kept) && l.kept[i].Seq <= since {
		i++
	}
	for j < len(l.ring) && l.ring[j].Seq <= since {
		j++
	}
	for i < len(l.kept) || j < len(l.ring) {
		switch {
		case j == len(l.ring) || (i < len(l.kept) && l.kept[i].Seq < l.ring[j].Seq):
			events = append(events, l.kept[i])
			i++
		case i < len(l.kept) && l.kept[i].Seq == l.ring[j].Seq:
			events = append(events, l.ring[j])
			i, j = i+1, j+1
		default:
			events = append(events, l.ring[j])
			j++
		}
	}
	last := l.next - 1
	if last > since && uint64(len(events)) < last-since {
		dropped = true
	}
	return events, last, dropped, l.notify
}
