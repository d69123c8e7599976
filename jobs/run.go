package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// maxTick bounds the dead-man switch's sleep: Go timers run on CLOCK_MONOTONIC, which
// stops while a VM is paused, so the loop looks at CLOCK_BOOTTIME at least once a second
// rather than trusting one long timer.
const maxTick = time.Second

// Run is the dead-man switch: it ends every job whose lease lapsed or whose max_lifetime
// passed, notices jobs whose processes all exited, saves the registry, and runs the leak
// check every SweepInterval. It returns when ctx ends; a job being ended then stays
// "ending" in the state document and the next start finishes it.
func (m *Manager) Run(ctx context.Context) error {
	if !m.acquire(ctx) {
		return nil // stopped while another sandboxd held the registry: nothing here is ours
	}
	var wg sync.WaitGroup
	m.mu.Lock()
	m.runCtx, m.wg = ctx, &wg
	m.mu.Unlock()
	defer func() {
		wg.Wait()
		m.closeRegistry()
		m.removeIdleRoot()
	}()
	if m.unavailable != "" {
		m.opts.Logger.Info("jobs unavailable", "reason", m.unavailable)
		<-ctx.Done()
		return nil
	}
	w, err := newWatcher(m)
	if err != nil {
		m.opts.Logger.Warn("no inotify for cgroup.events: exited jobs are noticed once a second", "err", err)
	} else {
		defer func() {
			m.mu.Lock()
			m.watch = nil
			m.mu.Unlock()
			w.close()
		}()
		m.mu.Lock()
		m.watch = w
		for _, j := range m.jobs {
			if !j.placing && (j.live() || j.State == api.JobLeaked) {
				j.wd = w.add(j)
			}
		}
		m.mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	m.removeStrayCgroups()
	if saved := m.savedTick(); saved > 0 {
		m.lastTick, m.dueTick, m.restartGap = saved, saved+int64(maxTick), true
	}
	defer func() {
		if m.tickFile != nil {
			m.tickFile.Close()
			m.tickFile = nil
		}
	}()
	sweep := time.NewTicker(m.opts.SweepInterval)
	defer sweep.Stop()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		next := min(m.tick(w == nil), maxTick)
		m.dueTick = m.lastTick + int64(next)
		t.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
		case <-sweep.C:
			wg.Add(1)
			go func() { defer wg.Done(); m.Leaks(ctx, false) }()
		}
	}
}

// tick ends the jobs that are due, re-checks leaked ones, and returns how long until the
// next lease or deadline is due. poll also checks every running job for having emptied
// (only without inotify).
func (m *Manager) tick(poll bool) time.Duration {
	boot := boottime()
	last, restart := m.lastTick, m.restartGap
	stall := m.noteTick(boot)
	m.restartGap = false
	next := int64(maxTick)
	var recheck []*job
	live := false
	m.mu.Lock()
	var ids []string
	if stall > 0 {
		ids = m.graceLocked(boot, last, stall)
	}
	for _, j := range m.jobs {
		if j.placing {
			continue
		}
		switch j.State {
		case api.JobRunning:
			if boot >= j.DeadlineBoot {
				m.startEndLocked(j, api.ReasonMaxLifetime)
				continue
			}
			if boot >= j.LeaseBoot {
				m.startEndLocked(j, api.ReasonLeaseExpired)
				continue
			}
			next = min(next, j.LeaseBoot-boot, j.DeadlineBoot-boot)
			if poll {
				recheck = append(recheck, j)
			}
		case api.JobEnding:
			m.startEndLocked(j, j.Reason) // after a restart: resume the ending
		case api.JobLeaked:
			recheck = append(recheck, j)
		}
	}
	for _, j := range m.jobs {
		live = live || j.live()
	}
	m.pruneEndedLocked()
	m.pruneLeasesLocked()
	next = max(next, int64(time.Millisecond))
	// Under mu, with the walk: a job placed after it is compared with this (rearmLocked).
	// The loop's timer is set a little later, after the tail below, so the look may come
	// that much after armedAt, never before.
	m.armedAt, m.idle = boot+next, !live
	m.mu.Unlock()
	if len(ids) > 0 {
		m.announceGrace(stall, restart, ids)
	}
	if live {
		m.writeTick(boot)
	}
	for _, j := range recheck {
		m.checkEmpty(j)
	}
	return time.Duration(next)
}

// checkEmpty notices a running job whose processes all exited (state ended, reason
// exited) and a leaked job that finally emptied (state killed).
func (m *Manager) checkEmpty(j *job) {
	pop, _, err := events(j.Cgroup)
	if err == nil && pop {
		return
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	m.mu.Lock()
	state := j.State
	if j.placing {
		state = ""
	}
	m.mu.Unlock()
	switch state {
	case api.JobRunning:
		m.finish(j, api.JobEnded, api.ReasonExited, j.Cgroup)
	case api.JobLeaked:
		m.finish(j, api.JobKilled, j.Reason, j.Cgroup)
	}
}

// removeStrayCgroups removes empty cgroups under <root>/jobs that no live job holds
// (left by a crash between mkdir and registration); non-empty ones are leaks, reported
// by the leak check, never removed silently.
func (m *Manager) removeStrayCgroups() {
	ents, err := os.ReadDir(filepath.Join(m.root, "jobs"))
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m.mu.Lock()
		j := m.jobOfCgroupLocked(filepath.Join(m.root, "jobs", e.Name()))
		held := j != nil && (j.live() || j.State == api.JobLeaked)
		m.mu.Unlock()
		if !held {
			unix.Rmdir(filepath.Join(m.root, "jobs", e.Name())) // EBUSY when populated: a leak; by path: safepath.go
		}
	}
}

// watcher is one inotify instance with a watch on every live job's cgroup.events, so a
// job whose processes exit by themselves is noticed at once and costs nothing while idle.
type watcher struct {
	m  *Manager
	fd int
	f  *os.File

	mu  sync.Mutex // guards wds
	wds map[int]*job
}

func newWatcher(m *Manager) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &watcher{m: m, fd: fd, f: os.NewFile(uintptr(fd), "inotify"), wds: map[int]*job{}}, nil
}

func (w *watcher) add(j *job) int {
	wd, err := unix.InotifyAddWatch(w.fd, filepath.Join(j.Cgroup, "cgroup.events"), unix.IN_MODIFY)
	if err != nil {
		return 0
	}
	w.mu.Lock()
	w.wds[wd] = j
	w.mu.Unlock()
	return wd
}

func (w *watcher) remove(wd int) {
	w.mu.Lock()
	delete(w.wds, wd)
	w.mu.Unlock()
	unix.InotifyRmWatch(w.fd, uint32(wd))
}

func (w *watcher) close() { w.f.Close() }

// run reads inotify events until ctx ends (closing the file unblocks the read).
func (w *watcher) run(ctx context.Context) {
	go func() { <-ctx.Done(); w.f.SetReadDeadline(time.Now()) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		var hit []*job
		overflow := false
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafePointer(&buf[off]))
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				overflow = true
			}
			if j, ok := w.wds[int(ev.Wd)]; ok {
				hit = append(hit, j)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		if overflow {
			for _, j := range w.wds {
				hit = append(hit, j)
			}
		}
		w.mu.Unlock()
		for _, j := range hit {
			w.m.checkEmpty(j)
		}
	}
}

// removeIdleRoot removes <root>/jobs and the root itself at stop when no job holds them
// (nothing runs, nothing leaked), so a daemon leaves no cgroup behind. A delegated root is
// systemd's to remove.
func (m *Manager) removeIdleRoot() {
	m.mu.Lock()
	for _, j := range m.jobs {
		if j.live() || j.State == api.JobLeaked {
			m.mu.Unlock()
			return
		}
	}
	m.rootReady = false
	m.mu.Unlock()
	if m.root == "" || m.unavailable != "" {
		return
	}
	// By path: cgroup rmdirs below a root walked safely at start (safepath.go).
	unix.Rmdir(filepath.Join(m.root, "jobs")) // EBUSY or ENOTEMPTY while a stray cgroup is left: kept
	if !m.delegated {
		unix.Rmdir(m.root) // by path, as above
	}
}
