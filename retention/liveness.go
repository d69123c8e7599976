package retention

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/proclocks"
)

// liveCheck carries one job through a liveness decision: inputs copied under the site
// lock, the /proc reads done without it, the result applied under it again.
type liveCheck struct {
	j         *job
	pid       int32
	sight     sighting
	haveSight bool
	cached    bool // j's ownership decision applies to the process with ticks cachedTicks
	cachedOwn bool
	cachedTks uint64

	live     uint8
	newSight bool // sight is a first sighting to record
	decided  bool // ownership decided for decTicks
	own      bool
	decTicks uint64
}

// refreshLiveness decides CONTRACT §8 liveness for jobs (nil: every job of the site). It
// reads /proc/locks and the processes the pid files name; it never takes a lock and never
// looks at a clock. Where it cannot know (a cmdline read that hangs), the job stays
// liveUnknown and its files are kept.
func (s *site) refreshLiveness(jobs []*job) {
	p := s.m.proc
	locks, lerr := p.locks()
	var pids map[int32]struct{}
	if jobs == nil {
		pids, _ = p.pids() // nil on error: every pid is then read directly
	}
	s.mu.Lock()
	root := s.root
	if root == nil {
		s.mu.Unlock()
		return
	}
	maj, min := unix.Major(root.Dev()), unix.Minor(root.Dev())
	matchRoots := s.matchRoots
	full := jobs == nil
	if full {
		jobs = make([]*job, 0, len(s.idx.jobs))
		for _, j := range s.idx.jobs {
			jobs = append(jobs, j)
		}
	}
	var checks []liveCheck
	holder := s.m.opts.Jobs
	for _, j := range jobs {
		if s.idx.jobs[j.id] != j {
			continue
		}
		if holder != nil && holder.Holds(s.name, j.id) {
			s.setLiveLocked(j, liveRunning)
			continue
		}
		locked := false
		if len(locks) > 0 {
			for i := range j.entries {
				if _, ok := locks[proclocks.Inode{Major: maj, Minor: min, Ino: j.entries[i].ino}]; ok {
					locked = true
					break
				}
			}
		}
		switch {
		case locked:
			s.setLiveLocked(j, liveRunning)
		case lerr != nil:
			s.setLiveLocked(j, liveUnknown) // cannot read the locks: cannot know
		case j.pid == 0:
			s.setLiveLocked(j, liveDead)
		default:
			c := liveCheck{j: j, pid: j.pid, cached: j.ownDecided, cachedOwn: j.own, cachedTks: j.ownTicks}
			c.sight, c.haveSight = s.sightings[j.id]
			if c.haveSight && c.sight.Pid != j.pid {
				c.haveSight = false // the pid file was rewritten: a new first sighting
			}
			if _, alive := pids[j.pid]; pids != nil && !alive {
				if !c.haveSight {
					s.sightings[j.id] = sighting{Pid: j.pid}
					s.sightDirty = true
				}
				s.setLiveLocked(j, liveDead)
				continue
			}
			checks = append(checks, c)
		}
	}
	s.mu.Unlock()

	for i := range checks {
		s.decide(&checks[i], matchRoots)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != root {
		return
	}
	for _, c := range checks {
		j := c.j
		if s.idx.jobs[j.id] != j || j.pid != c.pid {
			continue // changed meanwhile: the next refresh decides
		}
		if c.newSight {
			s.sightings[j.id] = c.sight
			s.sightDirty = true
		}
		if c.decided {
			j.ownDecided, j.own, j.ownTicks = true, c.own, c.decTicks
		}
		s.setLiveLocked(j, c.live)
	}
	if full {
		s.recountLocked()
	}
}

// decide works out whether c's pid is a live process that is the job's own.
func (s *site) decide(c *liveCheck, matchRoots []string) {
	p := s.m.proc
	st, alive := p.stat(c.pid)
	switch {
	case !alive:
		c.live = liveDead
		if !c.haveSight {
			c.newSight, c.sight = true, sighting{Pid: c.pid}
		}
		return
	case !c.haveSight:
		// First sighting: by definition the process the pid file names now is the job's.
		c.newSight, c.sight = true, sighting{Pid: c.pid, Ticks: st.startTicks}
		c.live = liveRunning
		return
	case c.sight.Ticks != 0 && c.sight.Ticks == st.startTicks:
		c.live = liveRunning // the very process first seen: raw ticks, never wall time
		return
	case c.cached && c.cachedTks == st.startTicks:
		c.live = liveDead
		if c.cachedOwn {
			c.live = liveRunning
		}
		return
	}
	own := p.holdsUnder(c.pid, func(path string) bool { return pathOfJob(path, matchRoots, c.j.id) })
	if !own {
		args, err := p.cmdline(c.pid)
		switch {
		case errors.Is(err, errCmdlineTimeout):
			c.live = liveUnknown
			return
		case err != nil:
			c.live = liveDead // gone while we looked
			return
		}
		own = namesJob(args, c.j.id)
	}
	c.decided, c.own, c.decTicks = true, own, st.startTicks
	c.live = liveDead // a reused pid: some other process now
	if own {
		c.live = liveRunning
	}
}

// pathOfJob reports whether an absolute path (a /proc/PID/fd link) is one of the job's
// entries or lies inside one.
func pathOfJob(path string, roots []string, id string) bool {
	for _, r := range roots {
		rest, ok := strings.CutPrefix(path, r+"/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		if jobID(name) == id {
			return true
		}
	}
	return false
}

// setLiveLocked records a liveness verdict and moves the job in or out of the heap.
func (s *site) setLiveLocked(j *job, live uint8) {
	if j.live == live {
		return
	}
	j.live = live
	s.idx.place(j)
}

// recountLocked recomputes the running count and the oldest job outside the heap.
func (s *site) recountLocked() {
	var running int64
	var oldest int64
	for _, j := range s.idx.jobs {
		if j.live != liveDead {
			running++
		}
		if j.heapIdx < 0 && len(j.entries) > 0 && (oldest == 0 || j.newest < oldest) {
			oldest = j.newest
		}
	}
	s.running, s.heldOldest = running, oldest
	s.m.changes.Add(1)
	for id := range s.sightings {
		if _, ok := s.idx.jobs[id]; !ok {
			delete(s.sightings, id)
			s.sightDirty = true
		}
	}
}
