package daemon

import (
	"fmt"

	"github.com/sandboxd/sandboxd/internal/config"
)

// Overrides are the serve command's flags: the last layer of defaults → file → flags.
// They are re-applied on every reload, so a SIGHUP never undoes a flag.
type Overrides struct {
	Socket, HTTP, StateDir, Mode, LogLevel string
	// RegistryDir overrides [jobs] registry_dir (make run points it under ./.run, so a
	// non-root daemon needs no /run/sandboxd).
	RegistryDir string
}

// Apply sets the non-empty overrides on a copy of cfg and validates the result.
func (o Overrides) Apply(cfg *config.Config) (*config.Config, error) {
	c := *cfg
	if o.Socket != "" {
		c.Server.Socket = o.Socket
	}
	if o.HTTP != "" {
		c.Server.HTTP = o.HTTP
	}
	if o.StateDir != "" {
		c.Server.StateDir = o.StateDir
	}
	if o.RegistryDir != "" {
		c.Jobs.RegistryDir = o.RegistryDir
	}
	if o.Mode != "" {
		c.Server.Mode = o.Mode
	}
	if o.LogLevel != "" {
		c.Log.Level = o.LogLevel
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config after command-line flags: %w", err)
	}
	return &c, nil
}
