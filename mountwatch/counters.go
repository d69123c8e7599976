package mountwatch

// ProbeBuckets are the upper bounds (seconds) of the probe duration histogram; a probe
// is a process start plus a few syscalls, so they start at 1 ms.
var ProbeBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Histogram is a cumulative histogram the daemon turns into a const metric at scrape time.
type Histogram struct {
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64 // upper bound → cumulative count
}

// Counters are the watcher's monotonic counts by mount name (CONTRACT §7), zero-initialised
// for every configured mount and every known label value.
type Counters struct {
	Failures         map[string]map[string]int64 // mount → state (denied|hung|disconnected|missing): failed rounds
	Remounts         map[string]map[string]int64 // mount → result (ok|failed|skipped|observed)
	Refreshes        map[string]map[string]int64 // mount → result (ok|failed|observed|pushed)
	UnhealthySeconds map[string]float64
	Aborts           map[string]int64
	Guards           map[string]int64
	LinkRepairs      map[string]int64
	LinkProblems     map[string]int64
	ProbeDurations   map[string]Histogram
}

func newCounters() Counters {
	return Counters{
		Failures: map[string]map[string]int64{}, Remounts: map[string]map[string]int64{},
		Refreshes: map[string]map[string]int64{}, UnhealthySeconds: map[string]float64{},
		Aborts: map[string]int64{}, Guards: map[string]int64{}, LinkRepairs: map[string]int64{},
		LinkProblems: map[string]int64{}, ProbeDurations: map[string]Histogram{},
	}
}

// ensure zero-initialises every series of a mount.
func (c *Counters) ensure(name string) {
	if _, ok := c.Failures[name]; ok {
		return
	}
	c.Failures[name] = map[string]int64{"denied": 0, "hung": 0, "disconnected": 0, "missing": 0}
	c.Remounts[name] = map[string]int64{"ok": 0, "failed": 0, "skipped": 0, "observed": 0}
	c.Refreshes[name] = map[string]int64{"ok": 0, "failed": 0, "observed": 0, "pushed": 0}
	c.UnhealthySeconds[name] = 0
	c.Aborts[name], c.Guards[name], c.LinkRepairs[name], c.LinkProblems[name] = 0, 0, 0, 0
	b := map[float64]uint64{}
	for _, ub := range ProbeBuckets {
		b[ub] = 0
	}
	c.ProbeDurations[name] = Histogram{Buckets: b}
}

// forget drops every series of a released mount, so registrations cannot grow them forever.
func (c *Counters) forget(name string) {
	delete(c.Failures, name)
	delete(c.Remounts, name)
	delete(c.Refreshes, name)
	delete(c.UnhealthySeconds, name)
	delete(c.Aborts, name)
	delete(c.Guards, name)
	delete(c.LinkRepairs, name)
	delete(c.LinkProblems, name)
	delete(c.ProbeDurations, name)
}

func (c *Counters) observeProbe(name string, sec float64) {
	h := c.ProbeDurations[name]
	h.Count++
	h.Sum += sec
	for ub := range h.Buckets {
		if sec <= ub {
			h.Buckets[ub]++
		}
	}
	c.ProbeDurations[name] = h
}

// clone deep-copies the counters for a caller outside the lock.
func (c *Counters) clone() Counters {
	out := newCounters()
	for k, v := range c.Failures {
		out.Failures[k] = cloneMap(v)
	}
	for k, v := range c.Remounts {
		out.Remounts[k] = cloneMap(v)
	}
	for k, v := range c.Refreshes {
		out.Refreshes[k] = cloneMap(v)
	}
	for k, v := range c.UnhealthySeconds {
		out.UnhealthySeconds[k] = v
	}
	for k, v := range c.Aborts {
		out.Aborts[k] = v
	}
	for k, v := range c.Guards {
		out.Guards[k] = v
	}
	for k, v := range c.LinkRepairs {
		out.LinkRepairs[k] = v
	}
	for k, v := range c.LinkProblems {
		out.LinkProblems[k] = v
	}
	for k, v := range c.ProbeDurations {
		b := make(map[float64]uint64, len(v.Buckets))
		for ub, n := range v.Buckets {
			b[ub] = n
		}
		out.ProbeDurations[k] = Histogram{Count: v.Count, Sum: v.Sum, Buckets: b}
	}
	return out
}

func cloneMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// add2 counts one in c[name][key]; a mount released meanwhile (its series forgotten) is
// not counted, so a late worker of a released mount cannot bring its series back.
func add2(c map[string]map[string]int64, name, key string) {
	if byKey, ok := c[name]; ok {
		byKey[key]++
	}
}
