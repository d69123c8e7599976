package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// notifyHelper is the service a private systemd runs (Type=notify, WatchdogSec=): it
// uses Notifier and Watchdog as the daemon does. Its supervisor loop counts as fresh
// while the file "stall" is absent from $SANDBOXD_TEST_CTL; its STATUS line shows the
// pings sent and reloads done, so the test reads them back with systemctl show.
func notifyHelper() error {
	ctl := os.Getenv("SANDBOXD_TEST_CTL")
	if ctl == "" {
		return errors.New("SANDBOXD_TEST_CTL not set")
	}
	interval, ok := WatchdogInterval()
	if !ok {
		return errors.New("no watchdog: WATCHDOG_USEC missing or not for this pid")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	n := &Notifier{}
	w := &Watchdog{
		Notifier: n,
		Interval: interval,
		Fresh: func() bool {
			_, err := os.Stat(filepath.Join(ctl, "stall"))
			return errors.Is(err, os.ErrNotExist)
		},
	}
	wdDone := make(chan error, 1)
	go func() { wdDone <- w.Run(ctx) }()

	reloads := 0
	status := func() error {
		return n.Status(fmt.Sprintf("pings=%d reloads=%d", w.Stats().Pings, reloads))
	}
	if err := status(); err != nil {
		return err
	}
	if err := n.Ready(); err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			err := n.Stopping()
			return errors.Join(err, <-wdDone)
		case <-hup:
			if err := n.Reloading(); err != nil {
				return err
			}
			reloads++
			if err := n.Ready(); err != nil {
				return err
			}
		case <-tick.C:
		}
		if err := status(); err != nil {
			return err
		}
	}
}
