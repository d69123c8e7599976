package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/config"
)

// TestValidateRefusesWhatNewRefuses: `serve --wait-for-socket` checks its config with
// Validate before it waits for the daemon it replaces, so a config New would refuse exits
// while the old daemon still serves. Each config here got past loading (changed after the
// parse, as a check the loader lacks would let it through) and New refuses it: Validate
// refuses it with New's message, and creates neither the state dir nor the job registry.
// A good config passes.
func TestValidateRefusesWhatNewRefuses(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(c *config.Config, dir string)
		want   string
	}{
		{"unknown writer", func(c *config.Config, _ string) { c.Server.Writers = []string{"user:sandboxd-no-such-user"} }, "sandboxd-no-such-user"},
		{"unknown site owner", func(c *config.Config, dir string) {
			c.Sites = []config.Site{{Name: "a", Path: filepath.Join(dir, "a"), Owner: "user:sandboxd-no-such-user"}}
		}, "site[0].owner"},
		{"site twice", func(c *config.Config, dir string) {
			c.Sites = []config.Site{{Name: "a", Path: filepath.Join(dir, "a")}, {Name: "a", Path: filepath.Join(dir, "b")}}
		}, "configured twice"},
		{"relative cache root", func(c *config.Config, _ string) {
			c.Reclaim.Caches = []config.Cache{{Name: "x", Path: "rel/x"}}
		}, "not an absolute path"},
		{"mount twice", func(c *config.Config, dir string) {
			c.Mounts = append(c.Mounts, config.DefaultMount(), config.DefaultMount())
			for i := range c.Mounts {
				c.Mounts[i].Name, c.Mounts[i].Path = "m", filepath.Join(dir, "m"+string(rune('0'+i)))
			}
		}, "two entries with one name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			load := func() *config.Config {
				cfg := parseConfig(t, baseConfig(dir, noSites(dir)))
				cfg.Jobs.RegistryDir = filepath.Join(dir, "registry")
				return cfg
			}
			if err := Validate(load()); err != nil {
				t.Fatalf("Validate refuses the good config: %v", err)
			}
			cfg := load()
			tc.break_(cfg, dir)
			verr := Validate(cfg)
			for _, p := range []string{cfg.Server.StateDir, cfg.Jobs.RegistryDir} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("Validate made %s (%v): it must touch neither the state dir nor the registry", p, err)
				}
			}
			_, nerr := New(Options{Config: cfg, Logger: testLogger(t), ProbeCommand: []string{"mount-probe"}})
			if nerr == nil {
				t.Fatal("New accepts the broken config: the case tests nothing")
			}
			if verr == nil || verr.Error() != nerr.Error() || !strings.Contains(verr.Error(), tc.want) {
				t.Errorf("Validate: %v\nNew:      %v\nwant the same refusal, naming %q", verr, nerr, tc.want)
			}
		})
	}
}
