package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// eventLogSize is how many events GET /v1/events keeps (CONTRACT §4).
const eventLogSize = 1000

// eventLog is the audit trail: a ring of the last events, each also written as one
// structured log line. Followers wait on a channel closed at every append.
type eventLog struct {
	logger *slog.Logger
	now    func() time.Time
	// onRecord, when set, is called after every append (it invalidates cached answers).
	onRecord func()

	mu     sync.Mutex // guards the fields below
	ring   []api.Event
	next   uint64 // sequence number of the next event (first is 1)
	notify chan struct{}
}

func newEventLog(logger *slog.Logger, now func() time.Time) *eventLog {
	return &eventLog{logger: logger, now: now, next: 1, notify: make(chan struct{}),
		ring: make([]api.Event, 0, 64)}
}

// Record appends e, assigning its sequence number and time, and logs it.
func (l *eventLog) Record(e api.Event) {
	l.mu.Lock()
	e.Seq = l.next
	l.next++
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if len(l.ring) < eventLogSize {
		l.ring = append(l.ring, e)
	} else {
		copy(l.ring, l.ring[1:])
		l.ring[len(l.ring)-1] = e
	}
	ch := l.notify
	l.notify = make(chan struct{})
	l.mu.Unlock()
	close(ch)
	if l.onRecord != nil {
		l.onRecord()
	}

	attrs := []any{"seq", e.Seq, "kind", e.Kind, "subject", e.Subject}
	for k, v := range e.Fields {
		attrs = append(attrs, k, v)
	}
	level := slog.LevelInfo
	if e.Kind == api.EventRefusal {
		level = slog.LevelWarn
	}
	l.logger.Log(context.Background(), level, e.Message, attrs...)
}

// Since returns the kept events with Seq > since, the next sequence number, whether
// events after since were dropped from the ring, and a channel closed at the next append.
func (l *eventLog) Since(since uint64) (events []api.Event, next uint64, dropped bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.ring {
		if e.Seq > since {
			events = append(events, e)
		}
	}
	if len(l.ring) > 0 && l.ring[0].Seq > since+1 {
		dropped = true
	}
	if events == nil {
		events = []api.Event{}
	}
	return events, l.next - 1, dropped, l.notify
}
