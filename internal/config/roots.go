package config

import (
	"fmt"
	"path"
	"strings"
)

// systemDirs are the directories whose contents no age or size rule may prune: a site or
// cache root set to one of them by a typo ("/var" for "/var/tmp/ci") would delete a
// system's files by age. The multilib "/lib*" directories (lib32, lib64, libx32) count too.
var systemDirs = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/dev", "/proc", "/sys",
	"/run", "/var", "/var/lib", "/home", "/root"}

// dangerousRoot says why the clean absolute path p must not be a deletion root (a site or
// a cache), "" when it may be: "/", a top-level system directory, or the state directory
// or one of its ancestors (sandboxd's own cooldowns, sightings and reserve would go).
func dangerousRoot(p, stateDir string) string {
	switch {
	case p == "/":
		return "is the root directory: everything on the machine lies beneath it"
	case isSystemDir(p):
		return fmt.Sprintf("is the system directory %s: refusing to prune it by age or size", p)
	}
	if stateDir != "" && path.IsAbs(stateDir) {
		sd := path.Clean(stateDir)
		if sd == p {
			return fmt.Sprintf("is the state directory (server.state_dir %q)", stateDir)
		}
		if within(sd, p) {
			return fmt.Sprintf("contains the state directory (server.state_dir %q)", stateDir)
		}
	}
	return ""
}

func isSystemDir(p string) bool {
	for _, d := range systemDirs {
		if p == d {
			return true
		}
	}
	// /lib32, /lib64, /libx32 (and any such multilib dir), not a /library of someone's.
	rest, ok := strings.CutPrefix(p, "/lib")
	return ok && rest != "" && strings.Trim(rest, "0123456789x") == ""
}
