package daemon

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// statusTTL is how long an encoded GET /v1/status answer is reused. Encoding the whole
// state costs ~40 µs and dominated the endpoint under 32 concurrent clients; figures
// are sampled once a second anyway. Any event (a prune, a condition flip, a reclaim, a
// refusal), any mutating call and any reload invalidates it at once, so an answer is
// never older than what the caller itself just caused.
const statusTTL = 100 * time.Millisecond

// statusCache holds the last encoded status answer.
type statusCache struct {
	gen atomic.Uint64 // bumped by every change that must show at once

	mu   sync.Mutex // guards the fields below
	at   time.Time
	seen uint64
	body []byte
}

func (c *statusCache) invalidate() { c.gen.Add(1) }

// get returns the cached body when it is fresh, else builds, encodes and keeps a new one.
func (c *statusCache) get(build func() any) ([]byte, error) {
	gen := c.gen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body != nil && c.seen == gen && time.Since(c.at) < statusTTL {
		return c.body, nil
	}
	b, err := json.Marshal(build())
	if err != nil {
		return nil, err
	}
	c.body, c.seen, c.at = append(b, '\n'), gen, time.Now()
	return c.body, nil
}

func (d *Daemon) writeStatus(w http.ResponseWriter) error {
	body, err := d.statusCache.get(func() any { return d.Status() })
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}
