package api

import (
	"math"
	"strings"
	"testing"
)

// The percent in the fingerprint is df's: used/(used+avail), the filesystem object's
// used_ratio, not 1-avail/size, which counts the reserved blocks as used.
func TestFingerprintPercentIsUsedRatio(t *testing.T) {
	const gib = 1 << 30
	// 100 GiB ext4 with 5% reserved: 10 GiB used, 90 GiB free, 85 GiB available.
	m := Filesystem{Path: "/", SizeBytes: 100 * gib, FreeBytes: 90 * gib, AvailBytes: 85 * gib, Files: 1000, FilesFree: 900}
	m.UsedRatio = 10.0 / (10 + 85)
	if got := m.Fingerprint(); !strings.Contains(got, "(11% used)") {
		t.Errorf("Fingerprint = %q, want 11%% used (1-avail/size would say 15%%)", got)
	}
	m.UsedRatio = 0 // not filled in: derived from the same fields
	if got := m.Fingerprint(); !strings.Contains(got, "(11% used)") {
		t.Errorf("Fingerprint without used_ratio = %q, want 11%% used", got)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1, 7} {
		m.UsedRatio = bad
		if got := m.Fingerprint(); strings.Contains(got, "NaN") || strings.Contains(got, "Inf") || strings.Contains(got, "-") && strings.Contains(got, "-1") {
			t.Errorf("Fingerprint with used_ratio %v = %q", bad, got)
		}
	}
	if got := (Filesystem{Path: "/x"}).Fingerprint(); !strings.Contains(got, "(0% used)") {
		t.Errorf("empty figure: %q", got)
	}
}
