package mountwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// LinkConfig is a symlink outside a mount that must point into it.
type LinkConfig struct{ Path, Target string }

// MountConfig is one [[mount]] entry (CONTRACT §10). Zero durations and counts take the
// defaults of the contract.
type MountConfig struct {
	Name               string
	Path               string
	Required           bool
	ProbeInterval      time.Duration
	ProbeTimeout       time.Duration
	Canary             bool
	RemountUnit        string
	RemountCommand     []string
	CredentialFile     string
	RefreshCommand     []string
	RefreshAt          float64
	MaxRemountsPerHour int
	// RemountTimeout bounds one remount: the unit restart or the command's start, then the
	// wait for the new mount's first healthy probe (default: Options.CommandTimeout).
	RemountTimeout time.Duration
	Links          []LinkConfig
	Guard          bool
}

// UnitRestarter restarts a systemd unit and answers the job result ("done", "failed" ...).
// Package systemd's D-Bus restarter satisfies it.
type UnitRestarter interface {
	RestartUnit(ctx context.Context, name string) (string, error)
}

// Options configure a Watcher. Host paths are fields so that tests redirect them.
type Options struct {
	Mounts  []MountConfig
	Observe bool
	Now     func() time.Time
	Events  func(api.Event)
	Logger  *slog.Logger
	// ProcRoot is /proc; FusectlDir is /sys/fs/fuse/connections (fusectl is mounted there
	// when absent and an abort is needed).
	ProcRoot   string
	FusectlDir string
	// ProbeCommand runs the probe child: the daemon passes {os.Executable(), "mount-probe"}.
	ProbeCommand []string
	Restarter    UnitRestarter
	// CommandTimeout bounds remount and refresh commands and the wait for a remounted
	// entry (default 60s).
	CommandTimeout time.Duration
	// RetryBase and RetryMax bound the exponential backoff of remediation and failed
	// refreshes (defaults 1s and 5m).
	RetryBase, RetryMax time.Duration
	// OnRegistryChange, when set, is called after a mount was registered or released or a
	// registered mount's credential expiry changed, so the daemon can persist Registered.
	OnRegistryChange func()
	// Tick is the supervisor loop's period; it also bounds how late a wall-clock refresh
	// point is noticed (default 1s, lowered to the smallest probe interval).
	Tick time.Duration
}

const (
	defaultProbeInterval  = 5 * time.Second
	defaultProbeTimeout   = 5 * time.Second
	minProbeInterval      = 100 * time.Millisecond
	defaultRefreshAt      = 0.8
	defaultMaxRemounts    = 6
	defaultCommandTimeout = 60 * time.Second
)

// withDefaults fills zero fields and validates one mount; every message names the key.
func (c MountConfig) withDefaults() (MountConfig, error) {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("mount: name is required"))
	}
	if !filepath.IsAbs(c.Path) {
		errs = append(errs, fmt.Errorf("mount %q: path %q must be absolute", c.Name, c.Path))
	}
	c.Path = filepath.Clean(c.Path)
	// A probe_interval below 100 ms spins the loop (issue 21); the daemon refuses one, and
	// this floor holds for any other caller.
	if c.ProbeInterval > 0 && c.ProbeInterval < minProbeInterval {
		c.ProbeInterval = minProbeInterval
	}
	if c.ProbeTimeout > 0 && c.ProbeTimeout < minProbeInterval {
		c.ProbeTimeout = minProbeInterval
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = defaultProbeInterval
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = defaultProbeTimeout
	}
	if c.RefreshAt == 0 {
		c.RefreshAt = defaultRefreshAt
	}
	if c.RefreshAt <= 0 || c.RefreshAt >= 1 {
		errs = append(errs, fmt.Errorf("mount %q: refresh_at %v must lie between 0 and 1", c.Name, c.RefreshAt))
	}
	if c.MaxRemountsPerHour < 0 { // 0 means what the config says: never remount (issue 10)
		c.MaxRemountsPerHour = defaultMaxRemounts
	}
	if c.RemountUnit != "" && len(c.RemountCommand) > 0 {
		errs = append(errs, fmt.Errorf("mount %q: set remount_unit or remount_command, not both", c.Name))
	}
	if c.CredentialFile != "" && !filepath.IsAbs(c.CredentialFile) {
		errs = append(errs, fmt.Errorf("mount %q: credential_file %q must be absolute", c.Name, c.CredentialFile))
	}
	for i, l := range c.Links {
		if !filepath.IsAbs(l.Path) || !filepath.IsAbs(l.Target) {
			errs = append(errs, fmt.Errorf("mount %q: links[%d]: path and target must be absolute", c.Name, i))
		}
		if within(l.Path, c.Path) {
			errs = append(errs, fmt.Errorf("mount %q: links[%d]: path %q must live outside the mount", c.Name, i, l.Path))
		}
	}
	return c, errors.Join(errs...)
}

func validateMounts(ms []MountConfig) ([]MountConfig, error) {
	var errs []error
	seen := map[string]bool{}
	out := make([]MountConfig, 0, len(ms))
	for _, m := range ms {
		c, err := m.withDefaults()
		if err != nil {
			errs = append(errs, err)
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("mount %q: two entries with one name", c.Name))
		}
		seen[c.Name] = true
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, filepath.Clean(p))
	return err == nil && (rel == "." || (rel != ".." && !startsDotDot(rel)))
}

func startsDotDot(rel string) bool {
	return len(rel) >= 3 && rel[:3] == "../"
}
