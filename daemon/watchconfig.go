package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchConfigSettle is how long the config directory must be quiet after a change
// before the file is read: a kubelet's ConfigMap update is several renames in a row.
const watchConfigSettle = 200 * time.Millisecond

// WatchConfig reloads the config (as SIGHUP does) whenever the content of the config
// file changes, until ctx ends: `serve --watch-config`, for a Kubernetes ConfigMap
// mounted as a volume (issue 25: an edit used to need a manual rollout). The kubelet
// updates such a volume by swapping the ..data symlink of the directory, never by
// writing the file, so the directory is watched, not the file, and every event there
// leads to a read of the file (through its links) and a reload only when its bytes
// changed: a touch or an unrelated file reloads nothing. A rejected file is logged by
// Reload (the last good config stays) and tried again at its next change. Without a
// config file it does nothing.
func (d *Daemon) WatchConfig(ctx context.Context) error {
	path := d.opts.ConfigPath
	if path == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	sum := func() []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		s := sha256.Sum256(b)
		return s[:]
	}
	last := sum()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			settle.Reset(watchConfigSettle)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.logger.Warn("watching the config file", "path", path, "err", err)
		case <-settle.C:
			now := sum()
			if now == nil || bytes.Equal(now, last) {
				continue
			}
			last = now
			d.logger.Info("config file changed: reloading", "path", path)
			d.Reload()
		}
	}
}
