package systemd

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// WatchdogInterval returns WatchdogSec= as systemd passed it (WATCHDOG_USEC), and whether
// the watchdog is enabled for this process (WATCHDOG_PID, when set, must be ours). Read it
// once at start-up. The environment is left in place: go-systemd's unset flag would hide
// it from every later reader, and it cannot change under a running process anyway.
func WatchdogInterval() (time.Duration, bool) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil || d <= 0 {
		// A malformed WATCHDOG_USEC is treated as "no watchdog": systemd never sends one.
		return 0, false
	}
	return d, true
}

// Watchdog sends WATCHDOG=1 every Interval/2 while Fresh reports that the daemon's
// supervisor loop ran recently. When the loop stalls the pings stop, so systemd restarts a
// daemon that is alive but no longer doing its job; a free-running ticker would hide
// exactly that failure (STYLE habit 8).
type Watchdog struct {
	Notifier *Notifier
	// Interval is WatchdogSec (see WatchdogInterval); pings go out at half of it.
	// Zero or negative disables the watchdog.
	Interval time.Duration
	// Fresh reports whether the supervisor loop ran recently enough to vouch for the
	// daemon. It is required: without it Run refuses to ping.
	Fresh func() bool
	// Logger receives one warning per stale episode; nil discards.
	Logger *slog.Logger

	pings, withheld atomic.Uint64
}

// WatchdogStats counts what the watchdog did, for metrics and tests.
type WatchdogStats struct {
	Pings    uint64 // WATCHDOG=1 datagrams sent
	Withheld uint64 // ticks on which the loop was stale and no ping went out
}

// Stats returns the counters so far.
func (w *Watchdog) Stats() WatchdogStats {
	return WatchdogStats{Pings: w.pings.Load(), Withheld: w.withheld.Load()}
}

// Run pings until ctx ends and returns nil then. It returns nil at once when there is no
// watchdog to feed (no interval, or not under systemd), and an error when Fresh is nil.
func (w *Watchdog) Run(ctx context.Context) error {
	if w.Interval <= 0 || !w.Notifier.Enabled() {
		return nil
	}
	if w.Fresh == nil {
		return errors.New("watchdog: no Fresh func; refusing to ping without knowing the supervisor loop runs")
	}
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	period := w.Interval / 2
	if period <= 0 {
		period = w.Interval
	}
	t := time.NewTicker(period)
	defer t.Stop()

	var staleSince, failingSince time.Time // zero while not in that episode
	for {
		if !w.Fresh() {
			w.withheld.Add(1)
			if staleSince.IsZero() {
				staleSince = time.Now()
				log.Warn("watchdog ping withheld: the supervisor loop is stale; systemd restarts the daemon if it stays so",
					"watchdog_sec", w.Interval)
			}
		} else {
			if !staleSince.IsZero() {
				log.Info("watchdog pings resumed: the supervisor loop is fresh again",
					"stale_for", time.Since(staleSince).Round(time.Millisecond))
				staleSince = time.Time{}
			}
			if err := w.Notifier.Watchdog(); err != nil {
				if failingSince.IsZero() {
					failingSince = time.Now()
					log.Warn("watchdog ping failed", "err", err)
				}
			} else {
				w.pings.Add(1)
				failingSince = time.Time{}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
