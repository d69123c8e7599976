package daemon

import (
	"os"
	"testing"

	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/mountwatch"
)

// TestMain dispatches the roles the test binary is re-executed for, before any test runs:
// the mount probe child (the daemon's default ProbeCommand is its own executable with
// "mount-probe", which here is this test binary) and the test FUSE server of
// internal/fusetest.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "mount-probe" {
		os.Exit(mountwatch.ProbeMain(os.Args[2:], os.Stdout))
	}
	if os.Getenv("SANDBOXD_START_RUNNER") != "" {
		os.Exit(startRunnerMain())
	}
	fusetest.Main()
	os.Exit(m.Run())
}
