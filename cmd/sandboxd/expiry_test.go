package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// A far-future credential expiry reads as a date, not as a saturated duration
// ("expires in 2562047h47m", QA), in mounts list and status alike (printMountLines).
func TestFarExpiryReadsAsADate(t *testing.T) {
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	soon := now.Add(15 * time.Minute)
	var b bytes.Buffer
	printMountLines(&b, []api.Mount{
		{Name: "far", Path: "/srv/far", State: api.MountHealthy, Since: now, Registered: true, CredentialExpiresAt: &far},
		{Name: "soon", Path: "/srv/soon", State: api.MountHealthy, Since: now, Registered: true, CredentialExpiresAt: &soon},
	}, now)
	out := b.String()
	if strings.Contains(out, "2562047h") || !strings.Contains(out, "credential expires in more than 100 years (9999-12-31)") {
		t.Errorf("far expiry:\n%s", out)
	}
	if !strings.Contains(out, "credential expires in 15m") {
		t.Errorf("near expiry:\n%s", out)
	}
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{now.AddDate(99, 0, 0), "in "},
		{now.AddDate(101, 0, 0), "in more than 100 years (2127-12-01)"},
		{time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), "more than 100 years ago (0001-01-01)"},
		{now.Add(-time.Hour), "1h ago"},
	} {
		if got := ago(c.t, now); !strings.HasPrefix(got, c.want) || strings.Contains(got, "2562047h") {
			t.Errorf("ago(%s) = %q, want %q", c.t, got, c.want)
		}
	}
}
