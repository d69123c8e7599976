package mountwatch

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// max_remounts_per_hour = 0 means "never remount", as the config documents; it ran as 6
// (issue 10, item 5).
func TestZeroRemountsPerHourNeverRemounts(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	var calls atomic.Int32
	cfg := f.mountCfg("agent")
	cfg.RemountUnit = "agent-fuse.service"
	cfg.MaxRemountsPerHour = 0
	o := f.opts(cfg)
	o.Restarter = restarterFunc(func(ctx context.Context, name string) (string, error) {
		calls.Add(1)
		return "done", nil
	})
	w := f.run(o)
	f.waitState("agent", api.MountHealthy)
	srv.Kill()
	// The skip is counted a moment before its event is recorded: wait for both.
	f.waitFor("the remount to be skipped, and an event naming the limit", func() bool {
		return w.Counters().Remounts["agent"]["skipped"] >= 1 && len(f.eventsWith(api.EventRemount, "max_remounts_per_hour (0) reached")) > 0
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("restarter called %d times with max_remounts_per_hour = 0", n)
	}
}
