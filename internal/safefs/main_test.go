package safefs

import (
	"os"
	"testing"

	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// TestMain dispatches the FUSE server roles the test binary is re-executed for.
func TestMain(m *testing.M) {
	fusetest.Main()
	os.Exit(m.Run())
}
