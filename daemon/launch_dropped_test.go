package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestLaunchedSiteDroppedUnmounts: a site launched on, then dropped from the
// configuration by a reload, keeps nothing of its filesystem open: a plain umount of it
// succeeds within a minute (the launch measurement held the site's directory open between
// launches; retention held its root while it was configured).
func TestLaunchedSiteDroppedUnmounts(t *testing.T) {
	kept, _, body := siteOnTmpfs(t, 32<<20, 0, "")
	dir, err := os.MkdirTemp("", "sandboxd-dropped-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) }) // by path: tests only, the MkdirTemp above
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	gone := filepath.Join(dir, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf("[[site]]\nname = \"gone\"\npath = %q\nmax_age = \"12h\"\nmin_age = \"15m\"\n", gone)
	td := startDaemon(t, body+extra)
	for range 5 {
		code, _, raw := td.do(t, "POST", "/v1/launch", `{"site":"gone","need_bytes":0}`)
		var r api.LaunchResponse
		if err := json.Unmarshal([]byte(raw), &r); err != nil || code != 200 || r.Filesystem == nil || r.Filesystem.Path != gone {
			t.Fatalf("launch on gone: %d %s", code, raw)
		}
	}
	cfgPath := td.d.opts.ConfigPath
	text, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(text), extra, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _, raw := td.do(t, "POST", "/v1/launch", `{"site":"aura-bg","need_bytes":0}`); code != 200 || !strings.Contains(raw, kept) {
		t.Fatalf("launch on the kept site: %d %s", code, raw)
	}
	var last error
	testenv.Eventually(t, time.Minute, "a plain umount of the dropped site's tmpfs", func() bool {
		last = unix.Unmount(dir, 0)
		return last == nil || !errors.Is(last, unix.EBUSY)
	})
	if last != nil {
		t.Fatalf("umount %s: %v", dir, last)
	}
	mounted = false
}
