package reclaim

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestAdaptiveThresholdIsNamedAsSuch: with reclaim_below = "1.5GiB" and growth raising the
// threshold to 10 GiB, make run's resume said "above filesystem.reclaim_below (10.0 GiB)",
// a value that key does not have. The adaptive threshold is named as adaptive, with why;
// the configured one keeps its key.
func TestAdaptiveThresholdIsNamedAsSuch(t *testing.T) {
	adaptive := api.Filesystem{ReclaimThresholdBytes: 10 << 30, Files: 100, ReclaimThresholdFiles: 5,
		ReclaimThresholdWhy: "growth 26.1 MiB/s × lead_time 10m, capped at 10.0 GiB"}
	got := aboveThresholds(adaptive)
	if strings.Contains(got, "filesystem.reclaim_below (") || strings.Contains(got, "filesystem.reclaim_below 10") || !strings.Contains(got, "the adaptive reclaim threshold 10.0 GiB (growth 26.1 MiB/s × lead_time 10m") {
		t.Errorf("adaptive threshold: %q", got)
	}
	static := api.Filesystem{ReclaimThresholdBytes: 3 << 29, ReclaimThresholdWhy: "reclaim_below 1.5GiB"}
	if got := aboveThresholds(static); got != "above filesystem.reclaim_below 1.5 GiB" {
		t.Errorf("configured threshold: %q", got)
	}
	f := &fsRun{targetBytes: 11 << 30, cur: adaptive}
	if got := f.targetDesc(); strings.Contains(got, "filesystem.reclaim_below (") || strings.Contains(got, "filesystem.reclaim_below 10") || !strings.Contains(got, "adaptive reclaim threshold 10.0 GiB") {
		t.Errorf("target: %q", got)
	}
}
