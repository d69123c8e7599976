package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

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
			fs.StringVar(&o.RegistryDir, "registry-dir", "", "override [jobs] registry_dir, where the live job registry is kept (a `DIR`)")
			fs.StringVar(&o.Mode, "mode", "", "override [server] mode: `MODE` enforce or observe")
			fs.StringVar(&o.LogLevel, "log-level", "", "override [log] level: `LEVEL` debug, info, warn or error")
			watch := fs.Bool("watch-config", false, "reload when the config file's content changes (a Kubernetes ConfigMap volume)")
			wait := fs.Bool("wait-for-socket", false, "when another sandboxd answers on the socket, wait until it stops instead of exiting (a DaemonSet handover)")
			return func(ctx context.Context, inv *invocation) int {
				o.Socket = inv.g.socket
				return runServe(ctx, inv, *o, serveOptions{watchConfig: *watch, waitForSocket: *wait})
			}
		}}
}

// runServe runs the daemon: config from the embedded default, then --config, then flags;
// listeners from systemd socket activation or made here; SIGHUP reloads.
// serveOptions are serve's flags that are not config overrides.
type serveOptions struct {
	watchConfig   bool // reload on a change of the config file's content (daemon.WatchConfig)
	waitForSocket bool // wait for another daemon answering on the socket to stop (a handover)
}

func runServe(ctx context.Context, inv *invocation, overrides daemon.Overrides, so serveOptions) int {
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
	if so.waitForSocket && errors.Is(err, daemon.ErrSocketAnswered) {
		ln, tcp, err = waitForSocket(ctx, cfg, logger, err)
	}
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
	if so.watchConfig {
		go func() {
			if err := d.WatchConfig(ctx); err != nil {
				logger.Error("cannot watch the config file; reload with SIGHUP", "path", *cfgPath, "err", err)
			}
		}()
	}
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

// socketRetry is how often a serve with --wait-for-socket tries the socket again.
const socketRetry = 100 * time.Millisecond

// waitForSocket is the handover of a DaemonSet whose pods replace each other on a node
// (an observe/enforce label flip, a rollout): the new pod finds the old one still
// answering on the socket and, instead of exiting into a crash-loop backoff, waits until
// it has stopped, then takes the socket. It says so once, and retries every 100 ms: while
// it waits no daemon answers on the node, and a runner's launch in that gap is refused
// (exit 69, no socket), so the gap is kept short (a retry is a stat and a connect).
func waitForSocket(ctx context.Context, cfg *config.Config, logger *slog.Logger, first error) (net.Listener, net.Listener, error) {
	logger.Info("another sandboxd answers on the socket: waiting for it to stop (--wait-for-socket)", "socket", cfg.Server.Socket, "err", first)
	t := time.NewTicker(socketRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("stopped while waiting for the socket: %w", first)
		case <-t.C:
		}
		ln, tcp, err := listeners(cfg)
		if !errors.Is(err, daemon.ErrSocketAnswered) {
			if err == nil {
				logger.Info("the other sandboxd stopped: socket taken", "socket", cfg.Server.Socket)
			}
			return ln, tcp, err
		}
	}
}
