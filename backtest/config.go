package backtest

import (
	"fmt"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/pressure"
)

// FromConfig is the policy cfg gives its [[filesystem]] number i (0-based): the same
// figures the daemon hands its pressure and reclaim components.
func FromConfig(cfg *config.Config, i int) (Config, error) {
	if i < 0 || i >= len(cfg.Filesystems) {
		return Config{}, fmt.Errorf("the config has %d [[filesystem]] entries, no number %d", len(cfg.Filesystems), i+1)
	}
	f := cfg.Filesystems[i]
	return Config{
		Filesystem: pressure.FSConfig{
			Path: f.Path, ReclaimBelow: f.ReclaimBelow, ReplaceBelow: f.ReplaceBelow,
			ReclaimBelowInodes: f.ReclaimBelowInodes, ReplaceBelowInodes: f.ReplaceBelowInodes,
			WarnTimeToFull: f.WarnTimeToFull, SizeSetting: f.SizeSetting,
		},
		Pressure: pressure.Options{
			SampleInterval: cfg.Health.SampleInterval, TransitionPeriod: cfg.Health.TransitionPeriod,
			LeadTime: cfg.Reclaim.LeadTime,
		},
		Headroom: int64(cfg.Reclaim.Headroom), HeadroomInodes: cfg.Reclaim.HeadroomInodes,
		Cooldown: cfg.Reclaim.Cooldown, MaxRunsPerHour: int(cfg.Reclaim.MaxRunsPerHour),
	}, nil
}
