package daemon

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A stop (SIGTERM: systemctl stop or restart, a package upgrade, a pod's deletion on a
// label flip or rollout) is graceful, as net/http's Shutdown is: the listeners close at
// once (a new connection finds no socket, or with socket activation waits in systemd's
// queue, for the next daemon), the calls already being answered finish with their normal
// answer, bounded by their own deadlines and by the stop grace, and only then do the
// components stop (the job registry among them: a job a call registers during the grace
// is journaled). A call still running when the grace ends (a statfs that hangs, a spawn
// whose report does not come) is cut short: it answers busy 503 "sandboxd is stopping
// ... retry: the next daemon answers it" (deadlineProblem), or a spawn registers nothing
// and kills what was started in its cgroup.

// defaultStopGrace bounds how long a stop waits for the calls in flight. It fits with the
// rest of the stop (the components' 5 s, the answers of calls cut short) under the
// DaemonSet's terminationGracePeriodSeconds (30) and systemd's TimeoutStopSec (90 by
// default; the unit sets none), and above the launch deadline of the default config (2 s).
const defaultStopGrace = 10 * time.Second

// cutShortWait is how long calls cut short at the grace's end have to write their answer
// before their connections are closed.
const cutShortWait = 2 * time.Second

// callCount counts the calls being answered, spawns whose connection left the HTTP server
// (a hijacked connection is no longer Shutdown's) among them.
type callCount struct{ n atomic.Int64 }

// counted wraps h so every call is counted while it runs.
func (c *callCount) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		defer c.n.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// wait returns true once no call runs, false when ctx ended first.
func (c *callCount) wait(ctx context.Context) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.n.Load() > 0 {
		select {
		case <-ctx.Done():
			return c.n.Load() == 0
		case <-t.C:
		}
	}
	return true
}

// stopGrace is the stop grace: defaultStopGrace unless a test set its own.
func (d *Daemon) stopGrace() time.Duration {
	if d.opts.stopGrace > 0 {
		return d.opts.stopGrace
	}
	return defaultStopGrace
}

// drain is the servers' part of a stop: stop taking calls, let the calls in flight finish
// within the grace, then cut short the rest (cutCalls ends their base context) and close
// their connections. It returns once no call runs, or cutShortWait after the grace.
func (d *Daemon) drain(servers []*http.Server, cutCalls context.CancelFunc) {
	gctx, cancel := context.WithTimeout(context.Background(), d.stopGrace())
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.Shutdown(gctx) }() // closes the listener at once
	}
	if n := d.calls.n.Load(); n > 0 {
		d.logger.Info("stopping: letting the calls in flight finish", "calls", n, "grace", d.stopGrace())
	}
	finished := d.calls.wait(gctx)
	wg.Wait()
	if finished {
		return
	}
	d.logger.Warn("stopping: the stop grace passed with calls in flight; they are cut short (busy, retry)",
		"calls", d.calls.n.Load(), "grace", d.stopGrace())
	cutCalls()
	actx, cancel2 := context.WithTimeout(context.Background(), cutShortWait)
	defer cancel2()
	d.calls.wait(actx)
	for _, s := range servers {
		s.Close()
	}
}

// background is the work Run starts besides its components and servers (the release of a
// job's mounts when the job ends, the start-up release of orphaned mounts, the resume
// after READY, a state probe): Run waits for it before it returns, and once Run is done
// nothing more is started, so a stopped daemon leaves nothing running (a job that ends
// after that has its mounts released by the next daemon's start-up, as one that ended
// while no daemon ran).
type background struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
}

// goBackground runs f on a goroutine Run waits for; false, and f is not run, once Run
// has returned (or is about to).
func (d *Daemon) goBackground(f func()) bool {
	b := &d.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f() }()
	return true
}

// closeBackground starts nothing more and waits for what runs (Run's end).
func (d *Daemon) closeBackground() {
	d.bg.mu.Lock()
	d.bg.closed = true
	d.bg.mu.Unlock()
	d.bg.wg.Wait()
}
