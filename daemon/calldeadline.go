package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callDeadline is a call's context with its deadline (what context.WithDeadline makes)
// whose timer, Done channel and registration in the parent context are set up only when
// something asks for Done: a launch that finds its site scanned, its prune lock free and
// its filesystem measured inline waits on nothing and never needs them (issue 27: they
// were ~5% of a launch's own work). Err says the deadline passed, or the parent's error,
// without them. stop is the cancel function: after it, Done is closed and Err is
// context.Canceled, as a cancelled context.WithDeadline's.
type callDeadline struct {
	parent   context.Context
	deadline time.Time

	once    sync.Once
	armed   atomic.Pointer[armedDeadline]
	stopped atomic.Bool
	stopAt  atomic.Int64 // when stop was called (Unix ns), set before stopped
}

type armedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// withCallDeadline is context.WithTimeout(parent, d) for one call, set up lazily.
func withCallDeadline(parent context.Context, d time.Duration) (*callDeadline, func()) {
	c := &callDeadline{parent: parent, deadline: time.Now().Add(d)}
	return c, c.stop
}

func (c *callDeadline) arm() *armedDeadline {
	c.once.Do(func() {
		ctx, cancel := context.WithDeadline(c.parent, c.deadline)
		if c.stopped.Load() {
			cancel()
		}
		c.armed.Store(&armedDeadline{ctx, cancel})
	})
	return c.armed.Load()
}

func (c *callDeadline) stop() {
	if !c.stopped.Load() {
		c.stopAt.Store(time.Now().UnixNano())
		c.stopped.Store(true)
	}
	if a := c.armed.Load(); a != nil {
		a.cancel()
	}
}

func (c *callDeadline) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *callDeadline) Done() <-chan struct{} {
	a := c.arm()
	if c.stopped.Load() {
		a.cancel() // stopped while arming: Done is closed, as after a cancel
	}
	return a.ctx.Done()
}

func (c *callDeadline) Err() error {
	if a := c.armed.Load(); a != nil {
		if c.stopped.Load() {
			a.cancel() // stopped while arming
		}
		return a.ctx.Err()
	}
	switch {
	case c.stopped.Load():
		if c.stopAt.Load() >= c.deadline.UnixNano() {
			return context.DeadlineExceeded // the deadline passed before the stop
		}
		return context.Canceled
	case c.parent.Err() != nil:
		return c.parent.Err()
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callDeadline) Value(key any) any { return c.parent.Value(key) }
