package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	// The first update must come after the watch is set up: wait for the kernel to show
	// an inotify watch on the volume's directory, then give WatchConfig a moment to read
	// the file it compares updates with (right after adding the watch).
	testenv.Eventually(t, time.Minute, "an inotify watch on the ConfigMap volume", func() bool { return inotifyWatched(vol.dir) })
	time.Sleep(200 * time.Millisecond)

	inForce := func(want string) func() bool {
		return func() bool {
			_, _, shown := td.do(t, "GET", "/v1/config", "")
			return strings.Contains(shown, want)
		}
	}
	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, `max_age = "2h"`, 1))
	testenv.Eventually(t, time.Minute, "the ConfigMap's new max_age in force", inForce(`max_age = \"2h`))

	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, "max_age = \"3h\"\nno_such_key = 1", 1))
	testenv.Eventually(t, time.Minute, "the rejected update to show in the metrics", func() bool {
		_, _, m := td.do(t, "GET", "/metrics", "")
		return strings.Contains(m, "sandboxd_config_last_reload_successful 0")
	})
	if !inForce(`max_age = \"2h`)() {
		t.Error("a rejected ConfigMap update changed the config in force")
	}
	vol.write(t, strings.Replace(string(text), `max_age = "1h"`, `max_age = "4h"`, 1))
	testenv.Eventually(t, time.Minute, "the fixed ConfigMap in force", inForce(`max_age = \"4h`))
}

// inotifyWatched says whether an inotify instance of this process watches dir: its inode
// is in the watch list the kernel shows in /proc/self/fdinfo.
func inotifyWatched(dir string) bool {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return false
	}
	want := fmt.Sprintf(" ino:%x ", st.Ino)
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + fd.Name()); l != "anon_inode:inotify" {
			continue
		}
		if b, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name()); err == nil && strings.Contains(string(b), want) {
			return true
		}
	}
	return false
}
