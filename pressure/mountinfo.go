package pressure

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// mountTable caches mountinfo: reading it costs far more than a statfs on a node with many
// mounts, and mounts change rarely. It is reloaded when older than ttl, or at once (at most
// once per second) when a device is not found in it.
type mountTable struct {
	path string
	ttl  time.Duration

	mu       sync.Mutex // guards the fields below
	entries  []mountinfo.Entry
	loadedAt time.Time
	err      error

	// For Measure's inline path (inline.go): an fd of mountinfo polled for changes, and
	// the chain verdicts of the table loaded at chainsOf.
	pollOpened bool
	pollFD     int
	chains     map[string]chainVerdict
	chainsOf   time.Time
	// lexicalMount's answers for the table loaded at lexicalOf.
	lexical   map[string]string
	lexicalOf time.Time
	// The ways of paths measured inline, for the next call (known.go).
	known knownWays
}

func newMountTable(procRoot string) *mountTable {
	return &mountTable{path: filepath.Join(procRoot, "self", "mountinfo"), ttl: 10 * time.Second, known: knownWays{ino: -1}}
}

// snapshot returns the current entries, reloading when they are older than the TTL, or
// older than a second when force is set.
func (t *mountTable) snapshot(force bool) ([]mountinfo.Entry, error) {
	entries, _, err := t.snapshotAt(force)
	return entries, err
}

// snapshotAt is snapshot that also says when the entries were loaded, the key of what is
// kept per table (chain verdicts, lexical mounts): read apart, the entries could be of
// one table and the time of the next, and an answer about the older table kept as the
// newer one's.
func (t *mountTable) snapshotAt(force bool) ([]mountinfo.Entry, time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	age := time.Since(t.loadedAt)
	if t.loadedAt.IsZero() || age > t.ttl || (force && age > time.Second) {
		data, err := os.ReadFile(t.path)
		t.loadedAt = time.Now()
		if err != nil {
			t.err = fmt.Errorf("read %s: %w", t.path, err)
		} else {
			t.entries, _ = mountinfo.Parse(data)
			t.err = nil
		}
	}
	return t.entries, t.loadedAt, t.err
}

// lexicalMount is the deepest mountpoint that holds path by name alone (no syscall on the
// path, so it cannot hang). It keys the one-call-per-filesystem rule; "" when unknown.
func (t *mountTable) lexicalMount(path string) string {
	entries, at, _ := t.snapshotAt(false)
	t.mu.Lock()
	if mp, ok := t.lexical[path]; ok && t.lexicalOf == at {
		t.mu.Unlock()
		return mp
	}
	t.mu.Unlock()
	e, _ := mountinfo.Deepest(entries, path, nil)
	// Kept per table, as the chain verdicts (the paths asked about are the configured
	// ones and the sites': a few): every measurement asks it (issue 27). Only while the
	// table it was found in is still the current one.
	t.mu.Lock()
	if t.loadedAt == at {
		if t.lexicalOf != at || t.lexical == nil || len(t.lexical) >= localChainCap {
			t.lexical, t.lexicalOf = map[string]string{}, at
		}
		t.lexical[path] = e.MountPoint
	}
	t.mu.Unlock()
	return e.MountPoint
}

// forDevice finds the mount of device maj:min that holds path: the deepest matching
// mountpoint that contains path, else the deepest matching one (a bind mount seen from
// elsewhere). ok is false when no entry has that device.
func (t *mountTable) forDevice(path string, maj, min uint32) (mountinfo.Entry, bool) {
	for _, force := range []bool{false, true} {
		entries, _ := t.snapshot(force)
		match := func(e mountinfo.Entry) bool { return e.Major == maj && e.Minor == min }
		if e, ok := mountinfo.Deepest(entries, path, match); ok {
			return e, true
		}
		var best mountinfo.Entry
		for _, e := range entries {
			if match(e) && len(e.MountPoint) > len(best.MountPoint) {
				best = e
			}
		}
		if best.MountPoint != "" {
			return best, true
		}
	}
	return mountinfo.Entry{}, false
}
