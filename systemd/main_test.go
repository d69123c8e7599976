package systemd

import (
	"fmt"
	"os"
	"testing"
)

// helperEnv selects a helper role when the test binary re-executes itself as a child
// (socket activation, or the service that a private systemd runs).
const helperEnv = "SANDBOXD_SYSTEMD_TEST_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		if err := runHelper(role); err != nil {
			fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func runHelper(role string) error {
	switch role {
	case "activation":
		return activationHelper()
	case "notify":
		return notifyHelper()
	case "restart":
		return restartHelper()
	case "serve":
		return serveHelper()
	}
	return fmt.Errorf("unknown helper role %q", role)
}
