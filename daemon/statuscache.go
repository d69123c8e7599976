package daemon

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// The GET /v1/status document is encoded once and served as bytes until something it
// shows may have changed (issue 27). Building and encoding it costs ~40 µs and, under 32
// concurrent callers, took most of the endpoint's time; serving kept bytes costs what a
// bare handler sending the same bytes costs.
//
// A kept document is never older than what the daemon has seen. It is keyed on two
// counters, read before the build and compared on every request (two atomic loads, no
// lock):
//
//   - the generation, moved by every recorded event (a condition raised or cleared, a
//     prune, a reclaim, a refusal, a job registered or ended, a mount's state), after
//     every mutating call (before its answer reaches the caller) and by every reload;
//   - the parts' change counters: the pressure watcher's, which moves after every
//     answered statfs and every sampling tick (so the document is rebuilt at least once
//     per sample_interval, and a sample that changed free bytes shows in the very next
//     GET), and the write sites', which moves with every change of a site's index, prune
//     totals, running jobs or problem.
//
// What moves with time alone (a site's oldest_age_seconds, pending_prune, a mount's
// last probe duration, the jobs summary's next lapse) is as of the document's build, at
// most one sample_interval old. A build that races a change is keyed on the counters
// read before it, so the next request rebuilds.
type statusCache struct {
	gen atomic.Uint64 // bumped by every change that must show at once

	doc atomic.Pointer[statusDoc] // the last document built; nil before the first
	mu  sync.Mutex                // one build at a time: 32 callers that miss build once
}

// statusDoc is one encoded answer and the counters it was built at.
type statusDoc struct {
	gen, parts uint64
	body       []byte
	length     []string // Content-Length, shared read-only by every answer
}

var jsonContentType = []string{"application/json"}

func (c *statusCache) invalidate() { c.gen.Add(1) }

// get returns the kept document when neither counter moved since it was built, else
// builds, encodes and keeps a new one. parts reads the parts' change counters.
func (c *statusCache) get(parts func() uint64, build func() any) (*statusDoc, error) {
	gen, p := c.gen.Load(), parts()
	if d := c.doc.Load(); d != nil && d.gen == gen && d.parts == p {
		return d, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, p = c.gen.Load(), parts() // re-read: what this build sees is at least this new
	if d := c.doc.Load(); d != nil && d.gen == gen && d.parts == p {
		return d, nil // another caller built it while this one waited
	}
	b, err := json.Marshal(build())
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	d := &statusDoc{gen: gen, parts: p, body: b, length: []string{strconv.Itoa(len(b))}}
	c.doc.Store(d)
	return d, nil
}

// statusParts sums the parts' change counters: each only grows, so the sum moves when
// any of them does. A reload that swaps the components moves the generation too.
func (d *Daemon) statusParts() uint64 {
	c := d.current()
	return c.pressure.Changes() + c.sites.Changes()
}

func (d *Daemon) writeStatus(w http.ResponseWriter) error {
	doc, err := d.statusCache.get(d.statusParts, func() any { return d.Status() })
	if err != nil {
		return err
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = doc.length // no chunked framing: one body, its size known
	w.WriteHeader(http.StatusOK)
	w.Write(doc.body)
	return nil
}
