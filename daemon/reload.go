package daemon

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
)

// reloadStats backs sandboxd_config_last_reload_*.
type reloadStats struct {
	mu sync.Mutex // guards ok, at
	ok bool
	at time.Time
}

func (r *reloadStats) record(ok bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok = ok
	if ok {
		r.at = now
	}
}

func (r *reloadStats) get() (bool, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.at
}

// Reload re-reads the config file (SIGHUP). An invalid file is rejected and logged with
// every problem, and the last good config stays. A valid one is applied: writers, log
// level and launch defaults at once; a changed section rebuilds the component it
// configures. The socket and TCP listener keep their addresses until a restart.
func (d *Daemon) Reload() error {
	d.notify.Reloading()
	defer d.notify.Ready()
	defer d.statusCache.invalidate()
	path := d.opts.ConfigPath
	next, err := config.LoadOrDefault(path)
	if err == nil {
		next, err = d.opts.Overrides.Apply(next)
	}
	if err == nil {
		err = d.apply(next)
	}
	if err != nil {
		d.reloads.record(false, d.now())
		d.events.Record(api.Event{Kind: api.EventConfig, Subject: path,
			Message: "config reload rejected; the last good config stays: " + err.Error()})
		return err
	}
	d.reloads.record(true, d.now())
	return nil
}

func (d *Daemon) apply(next *config.Config) error {
	prev := d.config()
	w, err := resolveWriters(next)
	if err != nil {
		return err
	}
	var restartOnly []string
	if next.Server.Socket != prev.Server.Socket || next.Server.HTTP != prev.Server.HTTP ||
		next.Server.SocketMode != prev.Server.SocketMode || next.Server.SocketGroup != prev.Server.SocketGroup ||
		next.Server.StateDir != prev.Server.StateDir {
		restartOnly = append(restartOnly, "server.socket/socket_mode/socket_group/http/state_dir")
	}
	rebuild := !reflect.DeepEqual(prev.Filesystems, next.Filesystems) ||
		!reflect.DeepEqual(prev.Sites, next.Sites) || !reflect.DeepEqual(prev.Reclaim, next.Reclaim) ||
		!reflect.DeepEqual(prev.Mounts, next.Mounts) || !reflect.DeepEqual(prev.Health, next.Health) ||
		prev.Server.Mode != next.Server.Mode
	var comps *components
	if rebuild {
		comps, err = d.buildComponents(next, d.current())
		if err != nil {
			return err
		}
	}
	d.cfgMu.Lock()
	old := d.comps
	d.cfg, d.writersV = next, w
	if comps != nil {
		d.comps = comps
	}
	d.cfgMu.Unlock()
	if comps != nil {
		comps.reclaim.Orphan(old.reclaim) // reserves the new config no longer keeps
	}
	if comps != nil && old.ctx != nil {
		old.stop()
		comps.start(old.ctx, old.wg, d.logger)
		d.readySent.Store(false)
	}
	if d.opts.LogLevel != nil {
		d.opts.LogLevel.Set(ParseLevel(next.Log.Level))
	}
	msg := "config reloaded"
	if rebuild {
		msg += "; components rebuilt"
	}
	if len(restartOnly) > 0 {
		msg += fmt.Sprintf("; %s changed and take effect at the next restart", strings.Join(restartOnly, ", "))
	}
	d.events.Record(api.Event{Kind: api.EventConfig, Subject: d.opts.ConfigPath, Message: msg})
	return nil
}

// ParseLevel maps [log] level to slog's levels (config has validated it).
func ParseLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
