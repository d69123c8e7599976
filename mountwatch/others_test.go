package mountwatch

import (
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// othersAt returns the entry of Others at path.
func othersAt(w *Watcher, path string) (api.Mount, bool) {
	for _, m := range w.Others() {
		if m.Path == path {
			return m, true
		}
	}
	return api.Mount{}, false
}

// With no mount configured the loop reads no mountinfo, yet status still lists a FUSE
// mount that appears after start-up, and drops it once it is gone.
func TestOthersListsUnconfiguredFUSEMountsWithoutConfig(t *testing.T) {
	f := newFixture(t)
	w := f.run(f.opts())
	if _, ok := othersAt(w, f.mnt); ok {
		t.Fatalf("others lists %s before anything is mounted there", f.mnt)
	}
	s := f.startServer(fusetest.Options{})
	m, ok := othersAt(w, f.mnt)
	if !ok || !isFUSE(m.FSType) || m.State != "" {
		t.Fatalf("others after mounting %s: %+v (found %v); want an unprobed FUSE entry", f.mnt, w.Others(), ok)
	}
	if err := s.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, ok := othersAt(w, f.mnt); ok {
		t.Fatalf("others still lists %s after it was unmounted: %+v", f.mnt, w.Others())
	}
}

// A configured mount is reported by Snapshot, never among the others.
func TestOthersExcludesConfiguredMount(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{})
	w := f.run(f.opts(f.mountCfg("m")))
	f.waitState("m", api.MountHealthy)
	if m, ok := othersAt(w, f.mnt); ok {
		t.Fatalf("others lists the configured mount: %+v", m)
	}
}
