package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestObserveReserveSaysWould: observe mode writes no reserve, so reserve_bytes is 0 and
// ReserveReleased says what would be held, not "ReserveHeld ... holds 0 B" (QA on issue
// 14). A reserve file an earlier enforce run left is reported as it is on disk.
func TestObserveReserveSaysWould(t *testing.T) {
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "4MiB"
reserve = "16MiB"
`, mnt)
	observe := func(o *Options) { o.Config.Server.Mode = api.ModeObserve }
	reserve := filepath.Join(mnt, ".sandboxd-reserve")

	td := startDaemon(t, body, observe)
	time.Sleep(500 * time.Millisecond) // a few samples and reserve ticks, in which enforce mode would write it
	st, err := td.client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Filesystems[0].ReserveBytes; got != 0 || allocatedBytes(reserve) != 0 {
		t.Fatalf("observe mode: reserve_bytes %d, file holds %d; want 0 and no file", got, allocatedBytes(reserve))
	}
	h, err := td.client.Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := healthCondition(h, api.CondReserveReleased, mnt)
	want := "observe mode: would hold a 16.0 MiB reserve at " + reserve
	if c.Status || c.Reason == "ReserveHeld" || !strings.Contains(c.Message, want) || strings.Contains(c.Message, "holds") || c.Since.IsZero() {
		t.Fatalf("observe mode without a reserve file: ReserveReleased %v %s (since %s): %q; want %q", c.Status, c.Reason, c.Since, c.Message, want)
	}
	// Nothing may be written yet (observe mode writes little): the state condition does
	// not claim that it was.
	if c := healthCondition(h, api.CondStateNotPersistent, td.d.state.Dir()); c.Status || strings.Contains(c.Message, "is written") {
		t.Errorf("StateNotPersistent at start: %v %q", c.Status, c.Message)
	}

	// A reserve an earlier enforce run wrote: observe mode leaves it and says what it holds
	// (a second daemon, from its own state; the first one writes nothing either).
	if err := testenv.Fill(reserve, 2<<20); err != nil {
		t.Fatal(err)
	}
	td2 := startDaemon(t, body, observe)
	st, err = td2.client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, disk := st.Filesystems[0].ReserveBytes, uint64(allocatedBytes(reserve)); got != disk || disk < 2<<20 {
		t.Fatalf("observe mode over an existing reserve: reserve_bytes %d, file holds %d", got, disk)
	}
	c = condition(st, api.CondReserveReleased, mnt)
	if c.Reason != "ReserveHeld" || !strings.Contains(c.Message, "holds 2.0 MiB, left as found (observe mode: would keep it at 16.0 MiB)") {
		t.Fatalf("observe mode over an existing reserve: %s: %q", c.Reason, c.Message)
	}
}

func healthCondition(h *api.Health, typ, subject string) api.Condition {
	for _, c := range h.Conditions {
		if c.Type == typ && c.Subject == subject {
			return c
		}
	}
	return api.Condition{}
}
