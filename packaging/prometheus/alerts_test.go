// Package prometheus holds sandboxd's Prometheus alert rules; its test checks them with
// promtool.
package prometheus

import (
	"os/exec"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestAlertRules(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "sandboxd-alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
