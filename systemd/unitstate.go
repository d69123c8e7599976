package systemd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// UnitState is what systemd says of a service unit: whether it runs, restarts or has
// failed, and its restart policy. A client whose call got no answer asks it, so that it
// can say "sandboxd is restarting" instead of only "no answer" (issue 25).
type UnitState struct {
	Unit               string
	ActiveState        string // active, activating, deactivating, failed, inactive
	SubState           string // running, start, auto-restart, failed, dead, ...
	Result             string // success, exit-code, watchdog, start-limit-hit, ...
	NRestarts          uint32 // automatic restarts since the unit was last started by hand
	StartLimitBurst    uint32
	StartLimitInterval time.Duration
	RestartDelay       time.Duration // RestartSec=
}

// Restarting says systemd is between two automatic starts of the unit, or in one.
func (u UnitState) Restarting() bool {
	return u.SubState == "auto-restart" || (u.ActiveState == "activating" && u.NRestarts > 0)
}

// Failed says the unit has failed (e.g. at its start limit) and systemd will not start it
// again by itself.
func (u UnitState) Failed() bool { return u.ActiveState == "failed" }

// Describe is one sentence on the unit for a client that got no answer; "" when the unit
// runs (or is stopped on purpose) and there is nothing to add.
func (u UnitState) Describe() string {
	switch {
	case u.Restarting():
		limit := ""
		if u.StartLimitBurst > 0 && u.StartLimitInterval > 0 {
			limit = fmt.Sprintf("; it fails after %d starts within %s", u.StartLimitBurst, short(u.StartLimitInterval))
		}
		times := fmt.Sprintf("%d times", u.NRestarts)
		if u.NRestarts == 1 {
			times = "once"
		}
		return fmt.Sprintf("sandboxd is restarting (%s: restarted %s so far by systemd, every %s%s); a retry may be answered by the next daemon",
			u.Unit, times, short(u.RestartDelay), limit)
	case u.Failed():
		return fmt.Sprintf("%s has failed (%s) and systemd will not start it again by itself; see journalctl -u %s, then systemctl reset-failed %s and start it",
			u.Unit, u.Result, u.Unit, u.Unit)
	case u.ActiveState == "inactive":
		return fmt.Sprintf("%s is stopped", u.Unit)
	}
	return ""
}

// QueryUnit asks systemd for unit's state over D-Bus: root through systemd's own socket
// (/run/systemd/private, no bus daemon needed), others through the system bus, where
// reading a unit's properties needs no privilege. Bound it with ctx.
func QueryUnit(ctx context.Context, unit string) (UnitState, error) {
	dial := sddbus.NewSystemConnectionContext
	if os.Geteuid() == 0 {
		dial = sddbus.NewSystemdConnectionContext
	}
	conn, err := dial(ctx)
	if err != nil {
		return UnitState{}, fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	up, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return UnitState{}, fmt.Errorf("unit %s: %w", unit, err)
	}
	sp, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return UnitState{}, fmt.Errorf("unit %s: %w", unit, err)
	}
	u := UnitState{Unit: unit}
	u.ActiveState, _ = up["ActiveState"].(string)
	u.SubState, _ = up["SubState"].(string)
	u.StartLimitBurst, _ = up["StartLimitBurst"].(uint32)
	if v, ok := up["StartLimitIntervalUSec"].(uint64); ok {
		u.StartLimitInterval = time.Duration(v) * time.Microsecond
	}
	u.Result, _ = sp["Result"].(string)
	u.NRestarts, _ = sp["NRestarts"].(uint32)
	if v, ok := sp["RestartUSec"].(uint64); ok {
		u.RestartDelay = time.Duration(v) * time.Microsecond
	}
	return u, nil
}

// short is d as a unit file would write it: 2s, 1m, 1m30s, 200ms.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
