package pressure

import (
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// call is one measurement (stat + statfs) of a path, run on its own goroutine. Its result
// fields are written before done is closed and never after.
type call struct {
	seq      uint64
	path     string
	existing bool // measure path's nearest existing ancestor (ExistingAncestor)
	hold     bool // measured inline, the path may be held open (MeasureSite)
	started  time.Time
	done     chan struct{}

	at  string // the path measured: path, or with existing its nearest existing ancestor
	fig api.Filesystem
	dev uint64
	err error
}

// prober enforces "at most one outstanding statfs per filesystem": a statfs on a hung FUSE
// path never returns, so a second one would only add a second blocked goroutine (and an
// OS thread) for nothing. Callers join or wait for the outstanding call instead.
type prober struct {
	mu      sync.Mutex // guards the fields below
	seq     uint64     // sequence number of the last call started
	cur     *call      // the outstanding call, nil when idle
	started uint64     // calls started in total (tests check that a hung fs gets one)
	inline  uint64     // of which measured on the caller's goroutine (Measure's inline path)
}

// begin returns the outstanding call, or starts run(c) for path on a new goroutine when
// idle. started tells which.
func (p *prober) begin(path string, now time.Time, run func(*prober, *call)) (c *call, started bool) {
	c, started = p.claim(path, false, now)
	if started {
		go run(p, c)
	}
	return c, started
}

// claim returns the outstanding call, or makes a new one outstanding when idle (started);
// the caller then runs it, here or on a goroutine, and finish ends it.
func (p *prober) claim(path string, existing bool, now time.Time) (c *call, started bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return p.cur, false
	}
	p.seq++
	p.started++
	c = &call{seq: p.seq, path: path, existing: existing, at: path, started: now, done: make(chan struct{})}
	p.cur = c
	return c, true
}

// finish marks c answered; the prober is idle again.
func (p *prober) finish(c *call) {
	p.mu.Lock()
	if p.cur == c {
		p.cur = nil
	}
	p.mu.Unlock()
	close(c.done)
}

// outstanding returns the call in flight (nil when idle) and the last sequence number.
func (p *prober) outstanding() (*call, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur, p.seq
}

func (p *prober) startedTotal() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// inlineTotal is how many of the calls started were measured inline.
func (p *prober) inlineTotal() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inline
}
