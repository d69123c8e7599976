package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// kubeletVolume lays out a ConfigMap volume as the kubelet does: the file is a link
// through ..data to a timestamped directory, and an update makes a new directory,
// points ..data at it with one rename, and removes the old one.
type kubeletVolume struct {
	dir string
	n   int
}

func (v *kubeletVolume) write(t *testing.T, text string) {
	t.Helper()
	v.n++
	ts := filepath.Join(v.dir, "..2026_12_03_"+string(rune('a'+v.n)))
	os.Mkdir(ts, 0o755)
	os.WriteFile(filepath.Join(ts, "sandboxd.toml"), []byte(text), 0o644)
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	os.Symlink(filepath.Base(ts), filepath.Join(v.dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(v.dir, "sandboxd.toml")); err != nil {
		os.Symlink("..data/sandboxd.toml", filepath.Join(v.dir, "sandboxd.toml"))
	}
	if old != "" {
		os.RemoveAll(filepath.Join(v.dir, old))
	}
}

// TestWatchConfigFollowsAConfigMap: with --watch-config, an update of a ConfigMap volume
// (the kubelet's symlink swap) reaches the daemon without a restart; a rejected update
// keeps the last good config; a change back to a valid file is taken again.
func TestWatchConfigFollowsAConfigMap(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.Mkdir(site, 0o755)
	vol := &kubeletVolume{dir: filepath.Join(dir, "config")}
	os.Mkdir(vol.dir, 0o755)
	body := "[[site]]\nname = \"s\"\npath = \"" + site + "\"\nmax_age = \"1h\"\n[[filesystem]]\npath = \"" + dir + "\"\nreserve = \"0\"\n"
	td := startDaemon(t, body)
	text, _ := os.ReadFile(filepath.Join(td.dir, "sandboxd.toml"))
	vol.write(t, string(text))
	td.d.opts.ConfigPath = filepath.Join(vol.dir, "sandboxd.toml")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- td.d.WatchConfig(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(200 * time.Millisecond) // the watch is set up before the first update

	inForce := func(want string) func() bool {
		return func() bool {
			_, _, shown := td.do(t, "GET", "/v1/config", "")
			return strings.Contains(shown, want)
		}
	}
	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, `max_age = "2h"`, 1))
	testenv.Eventually(t, 10*time.Second, "the ConfigMap's new max_age in force", inForce(`max_age = \"2h`))

	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, "max_age = \"3h\"\nno_such_key = 1", 1))
	testenv.Eventually(t, 10*time.Second, "the rejected update to show in the metrics", func() bool {
		_, _, m := td.do(t, "GET", "/metrics", "")
		return strings.Contains(m, "sandboxd_config_last_reload_successful 0")
	})
	if !inForce(`max_age = \"2h`)() {
		t.Error("a rejected ConfigMap update changed the config in force")
	}
	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, `max_age = "4h"`, 1))
	testenv.Eventually(t, 10*time.Second, "the fixed ConfigMap in force", inForce(`max_age = \"4h`))
}
