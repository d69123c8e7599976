package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A fill to 0 B that reclaim heals at once pages nobody (issue 23 item 1): the conditions
// raised on the full disk's sample are answered by the reclaim that freed the cache and
// clear at once, although health.transition_period is a minute, and no condition's
// message still reads "0 B free". The flap-hold is for disks that recover by themselves.
func TestSelfHealedFillClearsAtOnce(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 32<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.MkdirAll(cache, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	for i := 0; i < 12; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%d.tgz", i))
		testenv.Fill(p, 1<<20)
		os.Chtimes(p, old, old)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	text := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "4MiB"
replace_below = "2MiB"
reserve = "0"
warn_time_to_full = "0s"
[[reclaim.cache]]
name = "pkgs"
path = %q
[server]
socket = %q
socket_mode = "0666"
state_dir = %q
[health]
sample_interval = "100ms"
transition_period = "1m"
[reclaim]
auto_caches = []
protect = ["/home", "/root"]
`, mnt, cache, filepath.Join(dir, "s.sock"), filepath.Join(dir, "state"))
	td := startDaemonIn(t, dir, text)

	testenv.Fill(filepath.Join(mnt, "userdata"), 1<<30) // to 0 B free
	poll(t, time.Minute, "ReplaceRecommended raised on the full disk", func() bool {
		for _, c := range td.d.conditions() {
			if c.Type == api.CondReplaceRecommended && c.Subject == mnt && c.Status {
				return true
			}
		}
		return false
	})
	status, resp, p := launch(t, td, `{"need_bytes":"1KiB"}`)
	if status != 200 {
		t.Fatalf("launch on the full disk with a reclaimable cache: %d %s: %s", status, p.Code, p.Detail)
	}
	if resp.Verdict != api.VerdictOK || resp.Advice != nil {
		t.Errorf("launch verdict %q advice %v after reclaim freed the cache: %s", resp.Verdict, resp.Advice, resp.Detail)
	}
	// At once, not after the minute of the transition period.
	h := td.d.healthNow()
	if h.Status != api.HealthOK {
		t.Fatalf("health right after the self-heal: %s (%s)", h.Status, h.Summary)
	}
	for _, c := range h.Conditions {
		if c.Subject == mnt && strings.Contains(c.Message, " 0 B free") {
			t.Errorf("condition %s still reads the full disk's figures: %s", c.Type, c.Message)
		}
	}
	// The trail shows the raise and the clear: the truth, not a page.
	page, err := td.client.Events(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var raised, cleared bool
	for _, ev := range page.Events {
		if ev.Kind == api.EventCondition && ev.Subject == mnt && strings.HasPrefix(ev.Message, api.CondReplaceRecommended) {
			raised = raised || strings.Contains(ev.Message, "raised")
			cleared = cleared || strings.Contains(ev.Message, "cleared")
		}
	}
	if !raised || !cleared {
		t.Errorf("ReplaceRecommended raised %v, cleared %v in the trail", raised, cleared)
	}
}

// A disk that recovers by itself (no reclaim freed anything) keeps the flap-hold, and the
// held condition's message says what the disk shows now and when it clears.
func TestHeldConditionMessageFollowsTheDisk(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 32<<20, 0)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	text := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "4MiB"
replace_below = "2MiB"
reserve = "0"
warn_time_to_full = "0s"
[server]
socket = %q
socket_mode = "0666"
state_dir = %q
[health]
sample_interval = "100ms"
transition_period = "1m"
[reclaim]
auto_caches = []
protect = ["/home", "/root"]
`, mnt, filepath.Join(dir, "s.sock"), filepath.Join(dir, "state"))
	td := startDaemonIn(t, dir, text)
	fill := filepath.Join(mnt, "userdata")
	testenv.Fill(fill, 1<<30)
	active := func(typ string) (api.Condition, bool) {
		for _, c := range td.d.conditions() {
			if c.Type == typ && c.Subject == mnt && c.Status {
				return c, true
			}
		}
		return api.Condition{}, false
	}
	poll(t, time.Minute, "DiskPressure raised", func() bool { _, ok := active(api.CondDiskPressure); return ok })
	os.Remove(fill) // the writer's own clean-up: no reclaim answered it
	poll(t, time.Minute, "the held message to follow the disk", func() bool {
		c, ok := active(api.CondDiskPressure)
		return ok && strings.Contains(c.Message, "32.0 MiB free") && strings.Contains(c.Message, "clears at")
	})
}
