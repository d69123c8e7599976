package config

import (
	"fmt"
	"strings"
	"testing"
)

// Every dangerous root is refused as a site and as a cache, with its key and line; the
// directories beneath them that sandboxd is meant for are not.
func TestDangerousRootsRefused(t *testing.T) {
	bad := append([]string{"/", "/lib32", "/lib64", "/libx32", "/var/lib/sandboxd", "/var/lib/"}, systemDirs...)
	for _, p := range bad {
		for _, kind := range []string{"site", "reclaim.cache"} {
			src := fmt.Sprintf("[[%s]]\nname = \"x\"\npath = %q\n", kind, p)
			ps := problemsOf(t, src)
			key := kind + "[0].path"
			var found bool
			for _, pr := range ps {
				found = found || pr.Key == key && pr.Line == 3 && (strings.Contains(pr.Msg, "directory") || strings.Contains(pr.Msg, "protected"))
			}
			if !found {
				t.Errorf("%s %s: problems %v, want %s on line 3", kind, p, ps, key)
			}
		}
	}
	for _, p := range []string{"/var/tmp/ci", "/srv/pnpm-store", "/var/cache/ci", "/opt/x", "/library", "/usr/local/cache", "/var/lib/ci-cache"} {
		if why := dangerousRoot(p, "/var/lib/sandboxd"); why != "" {
			t.Errorf("dangerousRoot(%s) = %q, want it allowed", p, why)
		}
	}
}
