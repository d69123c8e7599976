package daemon

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestStateRewritesDoNotHideAWriter: sandboxd rewrites a 256 KiB state document ten times a
// second on the filesystem a user writes 1 MiB/s to. Each rewrite replaces the document, so
// it adds nothing; announced whole, the rewrites would read as 2.5 MiB/s that others freed
// and hide the writer. The growth reads the writer's rate (within 30%).
func TestStateRewritesDoNotHideAWriter(t *testing.T) {
	t.Parallel() // long, and mostly waiting: see "Parallel tests" in harness_test.go
	mnt := testenv.Tmpfs(t, 512<<20, 0)
	text := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "1MiB"
reserve = "0"
[server]
socket = %q
socket_mode = "0666"
state_dir = %q
[health]
sample_interval = "100ms"
[reclaim]
auto_caches = []
`, mnt, filepath.Join(mnt, "s.sock"), filepath.Join(mnt, "state"))
	td := startDaemonIn(t, mnt, text, func(o *Options) { o.growthWindow = 10 * time.Second })
	ctx := context.Background()
	doc := map[string]string{"pad": strings.Repeat("x", 256<<10)}
	type mark struct {
		at    time.Time
		bytes int64 // written by the user so far
	}
	var marks []mark
	var ratios []float64
	for i := 0; i < 100; i++ { // about 25 s: 2.5 windows
		if err := testenv.Fill(filepath.Join(mnt, fmt.Sprintf("user%d", i)), 256<<10); err != nil {
			t.Fatal(err)
		}
		marks = append(marks, mark{time.Now(), int64(i+1) * 256 << 10})
		for j := 0; j < 3; j++ {
			if err := td.d.state.Save("test-pad", doc); err != nil {
				t.Fatal(err)
			}
			time.Sleep(80 * time.Millisecond)
		}
		if i < 50 {
			continue // the window still holds the start
		}
		st, err := td.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The user's real rate over the last window, as df would show it.
		now, k := marks[len(marks)-1], len(marks)-1
		for k > 0 && now.at.Sub(marks[k-1].at) <= 10*time.Second {
			k--
		}
		real := float64(now.bytes-marks[k].bytes) / now.at.Sub(marks[k].at).Seconds()
		g := st.Filesystems[0].GrowthBytesPerSecond
		ratios = append(ratios, g/real)
		t.Logf("iteration %d: growth %s/s, the user writes %s/s", i, api.FormatSize(uint64(g)), api.FormatSize(uint64(real)))
	}
	slices.Sort(ratios)
	if m := ratios[len(ratios)/2]; math.Abs(m-1) > 0.3 {
		t.Fatalf("growth read %.0f%% of the user's rate (median over %d checks) while sandboxd rewrote its state", m*100, len(ratios))
	}
}
