package config

import (
	"fmt"
	"path"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// dangerousRoot says why the clean absolute path p must not be a deletion root (a site
// or a cache), "" when it may be: the state directory or a directory inside
// it (sandboxd's own cooldowns, sightings and reserve would go), "/", a system directory
// or a directory inside one (safefs.SystemRoot: /usr/bin, /var/log, /proc/1, ...), a home
// directory itself, or an ancestor of the state directory. The daemon applies
// the same rule to where the root really is on disk (safefs.Root.CheckSystem, run as one
// of the guards).
func dangerousRoot(p, stateDir string) string {
	sd := ""
	if stateDir != "" && path.IsAbs(stateDir) {
		sd = path.Clean(stateDir)
		switch {
		case sd == p:
			return fmt.Sprintf("is the state directory (server.state_dir %q)", stateDir)
		case within(p, sd):
			return fmt.Sprintf("lies inside the state directory (server.state_dir %q)", stateDir)
		}
	}
	if why := safefs.SystemRoot(p); why != "" {
		return why
	}
	if sd != "" && within(sd, p) {
		return fmt.Sprintf("contains the state directory (server.state_dir %q)", stateDir)
	}
	return ""
}
