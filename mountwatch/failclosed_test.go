package mountwatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// A required mount that is not there: missing, Check fails closed with a detail naming
// the mount, its state and since when, the condition is critical; with guard the bare
// mountpoint refuses writes (EPERM) and mounting over it still works.
func TestMissingFailsClosedAndGuard(t *testing.T) {
	f := newFixture(t)
	srv := f.server(fusetest.Options{}) // not started: the remount below starts it
	cfg := f.mountCfg("agent")
	cfg.Guard = true
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountMissing)
	_, unknown, detail, ok := w.Check([]string{"agent", "nope"})
	if ok || len(unknown) != 1 || unknown[0] != "nope" {
		t.Fatalf("Check ok=%v unknown=%v", ok, unknown)
	}
	for _, want := range []string{"mount agent (" + f.mnt + ")", "is missing since ", "not mounted"} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail %q lacks %q", detail, want)
		}
	}
	conds := w.Conditions()
	if len(conds) != 1 || conds[0].Type != api.CondMountUnavailable || conds[0].Severity != api.HealthCritical || conds[0].Reason != api.MountMissing {
		t.Fatalf("conditions %+v", conds)
	}
	f.waitFor("the guard", func() bool { return w.Counters().Guards["agent"] >= 1 })
	err := os.WriteFile(filepath.Join(f.mnt, "lost-write"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EPERM) {
		t.Fatalf("write into the guarded bare mountpoint: %v, want EPERM", err)
	}
	// Now give it a way to come back: the remount mounts over the immutable directory.
	cfg.RemountCommand = srv.StartCommand()
	if err := w.Reconfigure([]MountConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	f.waitState("agent", api.MountHealthy)
	if _, _, detail, ok := w.Check(nil); !ok {
		t.Fatalf("Check after the remount: %s", detail)
	}
	if len(w.Conditions()) != 0 {
		t.Fatalf("conditions remain: %+v", w.Conditions())
	}
	if len(f.eventsWith(api.EventMountGuard, "immutable")) == 0 {
		t.Fatal("no guard event")
	}
}

// Links: a missing one and one replaced by an empty file are rebuilt; one replaced by a
// file with data is left alone and reported.
func TestLinksRepaired(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{})
	os.Mkdir(filepath.Join(f.backing, "files"), 0o755)
	links := filepath.Join(f.base, "links")
	os.Mkdir(links, 0o755)
	missing, empty, full := filepath.Join(links, "missing"), filepath.Join(links, "empty"), filepath.Join(links, "full")
	target := filepath.Join(f.mnt, "files")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(full, []byte("data"), 0o644)
	cfg := f.mountCfg("agent")
	cfg.Links = []LinkConfig{{Path: missing, Target: target}, {Path: empty, Target: target}, {Path: full, Target: target}}
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	f.waitFor("links verified", func() bool { return len(f.mountState("agent").Links) == 3 && w.Counters().LinkRepairs["agent"] >= 2 })
	for _, p := range []string{missing, empty} {
		if got, err := os.Readlink(p); err != nil || got != target {
			t.Errorf("%s: readlink %q %v, want %s", p, got, err, target)
		}
	}
	if b, err := os.ReadFile(full); err != nil || string(b) != "data" {
		t.Fatalf("the file with data was touched: %q %v", b, err)
	}
	states := map[string]string{}
	for _, l := range f.mountState("agent").Links {
		states[l.Path] = l.State
	}
	if states[missing] != LinkOK || states[empty] != LinkOK || states[full] != LinkOccupied {
		t.Fatalf("link states %v", states)
	}
	if len(f.eventsWith(api.EventLinkRepair, "left alone")) != 1 {
		t.Fatal("the occupied link was not reported exactly once")
	}
}
