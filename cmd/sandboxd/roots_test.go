package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A site whose root is a symlink is not cleaned; `sandboxd launch` still exits 0 (a
// launcher must not break over sandboxd's config) but says so on stderr.
func TestLaunchWarnsOfASiteNotCleaned(t *testing.T) {
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	os.Mkdir(filepath.Join(mnt, "real"), 0o755)
	link := filepath.Join(mnt, "site")
	os.Symlink(filepath.Join(mnt, "real"), link)
	_, sock, _ := serveDaemon(t, t.TempDir(), fmt.Sprintf(`[[site]]
name = "bg"
path = %q
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
`, link, mnt))
	var r result
	deadline := time.Now().Add(15 * time.Second)
	for {
		r = sandboxd(t, nil, "launch", "--socket", sock, "--site", "bg")
		if strings.Contains(r.stderr, "warning") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := "sandboxd launch: warning: site bg is not cleaned: root " + link + " is a symlink"
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("launch: exit %d, stderr %q; want 0 and %q", r.code, r.stderr, want)
	}
}
