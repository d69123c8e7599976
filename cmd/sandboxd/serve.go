package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/daemon"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/systemd"
)

// serveGlobalUsage is the help of the global flags serve reads differently.
var serveGlobalUsage = map[string]string{
	"socket": "listen on this socket (overrides [server] socket)",
	"config": "config file (default: the embedded default, see 'sandboxd config default')",
}

func serveCommand() *command {
	return &command{name: "serve", summary: "run the daemon (only with serve: bare sandboxd prints this help)",
		long: `Config comes from the embedded default, then --config FILE, then the flags below.
SIGHUP reloads the config in place; an invalid file is rejected and the last good config stays.
Exit 0 on a clean stop (SIGTERM or SIGINT).`,
		globals: gSocket | gConfig, setup: func(fs *flag.FlagSet) runFunc {
			o := &daemon.Overrides{}
			fs.StringVar(&o.HTTP, "http", "", "override [server] http: a loopback `ADDR` for the read-only listener, e.g. 127.0.0.1:9477")
			fs.StringVar(&o.StateDir, "state-dir", "", "override [server] state_dir (a `DIR`)")
			fs.StringVar(&o.Mode, "mode", "", "override [server] mode: `MODE` enforce or observe")
			fs.StringVar(&o.LogLevel, "log-level", "", "override [log] level: `LEVEL` debug, info, warn or error")
			return func(ctx context.Context, inv *invocation) int {
				o.Socket = inv.g.socket
				return runServe(ctx, inv, *o)
			}
		}}
}

// runServe runs the daemon: config from the embedded default, then --config, then flags;
// listeners from systemd socket activation or made here; SIGHUP reloads.
func runServe(ctx context.Context, inv *invocation, overrides daemon.Overrides) int {
	stderr := inv.stderr
	cfgPath := &inv.g.config
	cfg, err := loadServeConfig(*cfgPath, overrides)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitConfig
	}
	lv := new(slog.LevelVar)
	lv.Set(daemon.ParseLevel(cfg.Log.Level))
	hopts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if cfg.Log.Format == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	logger := slog.New(h)

	d, err := daemon.New(daemon.Options{Config: cfg, ConfigPath: *cfgPath, Logger: logger, LogLevel: lv,
		Version: version, Commit: commit, Notifier: &systemd.Notifier{}, Overrides: overrides})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitConfig
	}
	ln, tcp, err := listeners(cfg)
	if err != nil {
		logger.Error("cannot listen", "err", err)
		return 1
	}
	logger.Info("sandboxd serving", "socket", ln.Addr().String(), "mode", cfg.Server.Mode, "version", version)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				// The config event of the reload is its one log line (ERROR when rejected).
				d.Reload()
			}
		}
	}()
	if err := d.Run(ctx, ln, tcp); err != nil {
		logger.Error("daemon stopped", "err", err)
		return 1
	}
	return exitOK
}

func loadServeConfig(path string, o daemon.Overrides) (*config.Config, error) {
	cfg, err := config.LoadOrDefault(path)
	if err != nil {
		return nil, err
	}
	return o.Apply(cfg)
}

// listeners takes systemd's sockets when activated, else makes the Unix socket and the
// optional loopback TCP listener from the config.
func listeners(cfg *config.Config) (net.Listener, net.Listener, error) {
	if systemd.Activated() {
		named, err := systemd.ListenersWithNames()
		if err != nil {
			return nil, nil, fmt.Errorf("socket activation: %w", err)
		}
		var unix, tcp net.Listener
		for _, ls := range named {
			for _, l := range ls {
				switch l.Addr().Network() {
				case "unix":
					if unix == nil {
						unix = l
					}
				case "tcp", "tcp4", "tcp6":
					if tcp == nil {
						tcp = l
					}
				}
			}
		}
		if unix != nil {
			return unix, tcp, nil
		}
	}
	ln, err := daemon.ListenUnix(cfg.Server.Socket, cfg.Server.SocketMode, cfg.Server.SocketGroup)
	if err != nil {
		return nil, nil, err
	}
	var tcp net.Listener
	if cfg.Server.HTTP != "" {
		tcp, err = daemon.ListenTCP(cfg.Server.HTTP)
		if err != nil {
			ln.Close()
			return nil, nil, err
		}
	}
	return ln, tcp, nil
}
