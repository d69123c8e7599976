package main

import (
	"os"

	"github.com/sandboxd/sandboxd/internal/config"
)

// configEnv names the config file a client command reads when the daemon cannot answer,
// to measure the disk the call is about (as --config does).
const configEnv = "SANDBOXD_CONFIG"

// clientConfig is the config a client command reads to know the disks a call is about:
// --config, else $SANDBOXD_CONFIG, else the packaged file when readable, else the
// embedded default (nil when none parses).
func (inv *invocation) clientConfig() *config.Config {
	for _, p := range []string{inv.g.config, os.Getenv(configEnv), config.DefaultPath} {
		if p == "" {
			continue
		}
		if cfg, err := config.LoadOrDefault(p); err == nil {
			return cfg
		}
	}
	cfg, err := config.LoadOrDefault("")
	if err != nil {
		return nil
	}
	return cfg
}

// disks are the paths whose filesystems a call about every watched disk (status,
// resume, reclaim, check, ...) is about: the config's [[filesystem]] paths.
func (inv *invocation) disks() []string {
	cfg := inv.clientConfig()
	if cfg == nil || len(cfg.Filesystems) == 0 {
		return []string{"/"}
	}
	out := make([]string, 0, len(cfg.Filesystems))
	for _, f := range cfg.Filesystems {
		out = append(out, f.Path)
	}
	return out
}

// siteDisk is the path a launch on site is about: the site's path in the config ("" =
// the only site), else the config's first [[filesystem]].
func (inv *invocation) siteDisk(site string) []string {
	cfg := inv.clientConfig()
	if cfg == nil {
		return []string{"/"}
	}
	for _, s := range cfg.Sites {
		if s.Name == site || (site == "" && len(cfg.Sites) == 1) {
			return []string{s.Path}
		}
	}
	return inv.disks()[:1]
}

// noDisk is what a command that is not about a disk (jobs, leaks) passes to failure: its
// failure prints no disk report.
var noDisk []string
