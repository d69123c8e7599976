package safefs

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func testenvRoot(t testing.TB) { testenv.RequireRoot(t) }
