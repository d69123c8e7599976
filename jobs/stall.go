package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// Stall grace (issue 20 item 1, CONTRACT §17). A lease is the runner's promise to be
// heard from; time during which sandboxd itself could not run — SIGSTOP, a host stall
// under memory pressure, a paused VM (CLOCK_BOOTTIME jumps), or sandboxd down between a
// crash and its restart — is not the runner's silence. The dead-man switch knows when it
// could not run: the gap between its own ticks on CLOCK_BOOTTIME, and, across a restart,
// the gap between the last tick it wrote down and its start. Every lease still valid at
// the last tick is then extended by that stall, and to at least one ttl past now, so the
// runner has one whole ttl to be heard again; max_lifetime stays hard.

// stallSlack is how late the loop may wake before the lateness counts as a stall: Go's
// scheduler and a busy host delay a timer by milliseconds, not by this.
const stallSlack = 500 * time.Millisecond

// tickName is the file in the registry directory that holds the loop's last tick
// ("<boot id> <CLOCK_BOOTTIME ns>"), overwritten in place while jobs are live: what a
// restarted daemon measures its downtime from.
const tickName = "jobs.tick"

// noteTick is called at the top of every tick with the boot time now. It returns the
// stall to grant (0: none): how much later than it meant to the loop woke, when that is
// more than stallSlack. The loop ran until its last tick and would have woken when due had
// it been able to, so the stall began between the two: counting from when it was due, never
// from the last tick, a lease that lapsed during the stall ends at most one ttl (and the
// slack) after it, as the grace promises, and no later.
func (m *Manager) noteTick(boot int64) time.Duration {
	last, due := m.lastTick, m.dueTick
	m.lastTick = boot
	if last == 0 || boot-due <= int64(stallSlack) {
		return 0
	}
	return time.Duration(boot - due)
}

// graceLocked extends every running lease that was still valid at the last tick (lastTick)
// by stall, and to at least one ttl past now, never past the job's max_lifetime. It
// returns the ids extended.
func (m *Manager) graceLocked(boot, lastTick int64, stall time.Duration) []string {
	var ids []string
	m.graceLeasesLocked(boot, lastTick, stall)
	for _, j := range m.jobs {
		if j.placing || j.State != api.JobRunning || j.LeaseBoot < lastTick {
			continue
		}
		if m.leases[j.Lease] != nil && j.Lease != "" {
			ids = append(ids, j.ID) // its shared lease was extended just above
			continue
		}
		lease := max(j.LeaseBoot+int64(stall), boot+int64(j.TTL))
		lease = min(lease, j.DeadlineBoot)
		if lease > j.LeaseBoot {
			j.LeaseBoot = lease
			ids = append(ids, j.ID)
			m.logLocked(record{Op: "hb", ID: j.ID, LeaseBoot: j.LeaseBoot, Beats: j.Heartbeats})
		}
	}
	return ids
}

// announceGrace tells of a stall grace: one event and one log line, however many jobs.
func (m *Manager) announceGrace(stall time.Duration, restart bool, ids []string) {
	what := fmt.Sprintf("sandboxd could not run for %s (a gap between its ticks on CLOCK_BOOTTIME: stopped, stalled or suspended)", api.FormatDuration(stall.Round(time.Millisecond)))
	if restart {
		what = fmt.Sprintf("sandboxd was down for %s (from its last saved tick to this start)", api.FormatDuration(stall.Round(time.Millisecond)))
	}
	shown := ids
	if len(shown) > 20 {
		shown = shown[:20]
	}
	msg := fmt.Sprintf("%s: %d lease(s) extended by that time and to at least one ttl from now, so their runners can be heard again; max_lifetime is unchanged", what, len(ids))
	m.opts.Logger.Warn("stall grace", "stall", stall, "restart", restart, "jobs", len(ids))
	m.emit(api.Event{Kind: api.EventJob, Subject: "jobs", Message: msg,
		Fields: map[string]any{"stall_seconds": stall.Seconds(), "restart": restart, "jobs": len(ids), "ids": shown}})
}

// tickPath is where the last tick is written down ("" when there is nowhere).
func (m *Manager) tickPath() string {
	if m.opts.RegistryDir == "" {
		return ""
	}
	return filepath.Join(m.opts.RegistryDir, tickName)
}

// writeTick writes the tick down in place (one small pwrite, no fsync: it must survive a
// crash of sandboxd, which the page cache does; a crash of the host ends every job anyway).
// Only while jobs are live: an idle daemon writes nothing.
func (m *Manager) writeTick(boot int64) {
	if m.tickFile == nil {
		p := m.tickPath()
		if p == "" {
			return
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return
		}
		m.tickFile = f
	}
	// Fixed width, so an overwrite never leaves a longer old tail behind.
	line := fmt.Sprintf("%-36s %020d\n", m.boot, boot)
	m.tickFile.WriteAt([]byte(line), 0)
}

// savedTick reads the tick an earlier run of this boot wrote down (0: none).
func (m *Manager) savedTick() int64 {
	p := m.tickPath()
	if p == "" {
		return 0
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != m.boot {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n
}
