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

	var ln, tcp net.Listener
	if so.waitForSocket {
		// What New would refuse is refused before the wait: a rollout of a broken config
		// exits here, and the daemon it would have replaced goes on serving.
		if err := daemon.Validate(cfg); err != nil {
			logger.Error("cannot start", "err", err)
			return exitConfig
		}
		// Before New: the daemon reads the job registry, the registered mounts and its
		// state once the daemon before it has stopped writing them.
		if ln, tcp, err = waitForSocket(ctx, cfg, logger); err != nil {
			logger.Error("cannot listen", "err", err)
			return 1
		}
	}
	d, err := daemon.New(daemon.Options{Config: cfg, ConfigPath: *cfgPath, Logger: logger, LogLevel: lv,
		Version: version, Commit: commit, Notifier: &systemd.Notifier{}, Overrides: overrides})
	if err != nil {
		logger.Error("cannot start", "err", err)
		closeListeners(ln, tcp)
		return exitConfig
	}
	if ln == nil {
		if ln, tcp, err = listeners(cfg); err != nil {
			logger.Error("cannot listen", "err", err)
			return 1
		}
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

func closeListeners(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}

// socketRetry is how often a serve with --wait-for-socket tries the socket again, and
// the job registry.
const socketRetry = 100 * time.Millisecond

// registryHandoverWait bounds the wait for the job registry once the socket is free: the
// daemon before this one lets go of it when its Run returns, after its calls drained
// (its stop grace, 10 s by default) and its components stopped (5 s at most).
const registryHandoverWait = 20 * time.Second

// waitForSocket is the handover of a daemon that replaces another on a node (a
// DaemonSet's label flip or rollout, a package upgrade, a restart that overlaps): the new
// one finds the old one still answering on the socket and, instead of exiting into a
// crash-loop backoff, waits until it has stopped, then takes the socket. It says so once,
// and retries every 100 ms: while it waits no daemon answers on the node, and a runner's
// launch in that gap is refused (exit 69, no socket), so the gap is kept short (a retry is
// a stat and a connect).
//
// Stopped means gone: the old daemon closes its socket at once on SIGTERM, then finishes
// the calls it took and stops its components, writing the job registry (held under a
// lock: jobs/acquire.go), the registered mounts and its state as it goes. The socket is
// taken once the old daemon has let go of the registry too, so that the new one reads
// them after its last write, adopts its jobs at once, and never runs its components next
// to the old one's. A registry still held registryHandoverWait after the socket freed (a
// stuck daemon, or another one given the same registry_dir) is not waited for longer
// here: the daemon starts, refuses job calls until the registry is free, takes it as soon
// as it is, and says so (the condition JobRegistryHeld).
func waitForSocket(ctx context.Context, cfg *config.Config, logger *slog.Logger) (net.Listener, net.Listener, error) {
	if systemd.Activated() {
		return listeners(cfg) // systemd holds the socket: there is no other daemon's to wait for
	}
	t := time.NewTicker(socketRetry)
	defer t.Stop()
	var waited, gaveUp bool
	var heldSince time.Time // when the socket was free and the registry still held
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("stopped while waiting for the other sandboxd to stop: %w", ctx.Err())
			case <-t.C:
			}
		}
		if socketAnswers(cfg.Server.Socket) {
			if !waited {
				logger.Info("another sandboxd answers on the socket: waiting for it to stop (--wait-for-socket)", "socket", cfg.Server.Socket)
				waited = true
			}
			continue
		}
		if !gaveUp && daemon.RegistryHeld(cfg) {
			if heldSince.IsZero() {
				heldSince = time.Now()
				logger.Info("the other sandboxd closed its socket and is stopping: waiting for it to let go of the job registry", "dir", cfg.Jobs.RegistryDir)
			}
			if time.Since(heldSince) < registryHandoverWait {
				continue
			}
			logger.Warn("the job registry is still held by another sandboxd: starting without it; job calls are refused until it is free, and it is taken as soon as it is",
				"dir", cfg.Jobs.RegistryDir, "waited", registryHandoverWait)
			gaveUp = true
		}
		ln, tcp, err := listeners(cfg)
		if errors.Is(err, daemon.ErrSocketAnswered) {
			continue // a daemon took the socket meanwhile
		}
		if err == nil && waited {
			logger.Info("the other sandboxd stopped: socket taken", "socket", cfg.Server.Socket)
		} else if err == nil && !heldSince.IsZero() {
			logger.Info("the other sandboxd stopped: socket taken, job registry free", "socket", cfg.Server.Socket)
		}
		return ln, tcp, err
	}
}

// socketAnswers says whether a daemon accepts connections on the Unix socket at path.
func socketAnswers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
