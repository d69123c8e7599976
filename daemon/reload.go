package daemon

import (
	"fmt"
	"log/slog"
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
// every problem, and the last good config stays. A valid one is applied in place:
// writers, log level and launch defaults at once; each component takes its changed
// settings and keeps its state (reconfigure.go); the start-up reclaim does not run again.
// The socket and TCP listener keep their addresses until a restart.
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
		d.events.Error(api.Event{Kind: api.EventConfig, Subject: path,
			Message: "config reload rejected; the last good config stays: " + err.Error()})
		return err
	}
	d.reloads.record(true, d.now())
	return nil
}

func (d *Daemon) apply(next *config.Config) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
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
	old := d.current()
	comps, starts, notes, err := d.reconfigure(old, prev, next)
	if err != nil {
		return err
	}
	d.cfgMu.Lock()
	d.cfg, d.writersV, d.comps = next, w, comps
	d.cfgMu.Unlock()
	for _, p := range starts {
		comps.run.start(p)
	}
	if d.opts.LogLevel != nil {
		d.opts.LogLevel.Set(ParseLevel(next.Log.Level))
	}
	msg := "config reloaded"
	if len(notes) == 0 {
		msg += "; components unchanged"
	} else {
		msg += "; " + strings.Join(notes, "; ")
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
