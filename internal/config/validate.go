package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// validate checks every value and every relation between values, adding one problem per
// bad key; it never stops at the first.
func validate(c *Config, ps *problems) {
	if c.Version != Version {
		ps.addf("version", "unsupported version %d: this sandboxd reads version %d", c.Version, Version)
	}
	validateServer(&c.Server, ps)
	oneOf(ps, "log.level", c.Log.Level, "debug", "info", "warn", "error")
	oneOf(ps, "log.format", c.Log.Format, "text", "json")
	validateMetrics(&c.Metrics, ps)
	notNegative(ps, "health.transition_period", c.Health.TransitionPeriod)
	aboveZero(ps, "health.sample_interval", c.Health.SampleInterval)
	aboveZero(ps, "launch.deadline", c.Launch.Deadline)
	sizeOK(ps, "launch.need_bytes", c.Launch.NeedBytes)
	validateFilesystems(c.Filesystems, ps)
	validateReclaim(&c.Reclaim, c.Server.StateDir, ps)
	validateSites(c.Sites, c.Reclaim.Protect, c.Server.StateDir, ps)
	validateOverlap(c, ps)
	validateMounts(c.Mounts, ps)
	if c.RuntimeMounts.MaxPerUID < 1 {
		ps.addf("mounts.max_registered_per_uid", "%d: want at least 1 (a share of max_registered for each uid other than root)", c.RuntimeMounts.MaxPerUID)
	}
	if c.Jobs.MaxPerUID < 1 {
		ps.addf("jobs.max_per_uid", "%d: want at least 1 (the live jobs one uid other than root may hold)", c.Jobs.MaxPerUID)
	}
	if c.RuntimeMounts.MaxRegistered < 0 {
		ps.addf("mounts.max_registered", "%d must not be negative (0: no mount may be registered at run time)", c.RuntimeMounts.MaxRegistered)
	}
	validateJobs(&c.Jobs, ps)
}

func validateJobs(j *Jobs, ps *problems) {
	if j.CgroupRoot != "" {
		absPath(ps, "jobs.cgroup_root", j.CgroupRoot, false)
	}
	aboveZero(ps, "jobs.default_ttl", j.DefaultTTL)
	aboveZero(ps, "jobs.max_lifetime", j.MaxLifetime)
	if j.MaxLifetime > MaxJobLifetime {
		ps.addf("jobs.max_lifetime", "%s: want at most %s", j.MaxLifetime, MaxJobLifetime)
	}
	notNegative(ps, "jobs.grace", j.Grace)
	aboveZero(ps, "jobs.unleased_max", j.UnleasedMax)
	notNegative(ps, "jobs.keep_ended", j.KeepEnded)
	absPath(ps, "jobs.registry_dir", j.RegistryDir, false)
	if j.KeepEndedMax < 1 || j.KeepEndedMax > 1<<20 {
		ps.addf("jobs.keep_ended_max", "%d is out of range: keep 1 to 1048576 ended jobs listed", j.KeepEndedMax)
	}
	if j.DefaultTTL > 0 && j.MaxLifetime > 0 && j.DefaultTTL > j.MaxLifetime {
		ps.addf("jobs.default_ttl", "%s is longer than jobs.max_lifetime (%s): no lease could last that long", j.DefaultTTL, j.MaxLifetime)
	}
}

func validateServer(s *Server, ps *problems) {
	// sun_path holds 108 bytes with the terminating NUL: a longer path cannot be bound.
	if absPath(ps, "server.socket", s.Socket, false) && len(s.Socket) > 107 {
		ps.addf("server.socket", "%q is %d bytes long, more than the 107 a Unix socket path may have", s.Socket, len(s.Socket))
	}
	if s.SocketMode&^0o777 != 0 {
		ps.addf("server.socket_mode", "%#o has bits beyond permissions; at most 0777", uint32(s.SocketMode))
	}
	if _, _, err := s.SocketGID(); err != nil {
		ps.addf("server.socket_group", "%v", err)
	}
	for i, w := range s.Writers {
		if _, _, err := resolveWriter(w); err != nil {
			ps.addf(fmt.Sprintf("server.writers[%d]", i), "%v", err)
		}
	}
	if s.HTTP != "" {
		if err := checkLoopback(s.HTTP); err != nil {
			ps.addf("server.http", "%v", err)
		}
	}
	absPath(ps, "server.state_dir", s.StateDir, false)
	oneOf(ps, "server.mode", s.Mode, api.ModeEnforce, api.ModeObserve)
}

func validateMetrics(m *Metrics, ps *problems) {
	// node_exporter's textfile collector reads only *.prom files of its directory.
	if absPath(ps, "metrics.textfile", m.Textfile, true) && !strings.HasSuffix(m.Textfile, ".prom") {
		ps.addf("metrics.textfile", "%q does not end in .prom: node_exporter's textfile collector reads only *.prom files", m.Textfile)
	}
	aboveZero(ps, "metrics.textfile_interval", m.TextfileInterval)
}

func validateFilesystems(fss []Filesystem, ps *problems) {
	seen := map[string]int{}
	for i, f := range fss {
		k := fmt.Sprintf("filesystem[%d]", i)
		if absPath(ps, k+".path", f.Path, false) {
			unique(ps, k+".path", path.Clean(f.Path), "path", "filesystem", i, seen)
		}
		pairOK(ps, k, "replace_below", f.ReplaceBelow, "reclaim_below", f.ReclaimBelow, units.Threshold.BytesString)
		pairOK(ps, k, "replace_below_inodes", f.ReplaceBelowInodes, "reclaim_below_inodes", f.ReclaimBelowInodes, units.Threshold.String)
		sizeOK(ps, k+".reserve", f.Reserve)
		absPath(ps, k+".reserve_path", f.ReservePath, true)
		notNegative(ps, k+".warn_time_to_full", f.WarnTimeToFull)
	}
}

// pairOK checks both thresholds and that the replace mark is not above the reclaim
// mark; a size and a percent cannot be compared without the filesystem's size.
func pairOK(ps *problems, k, replaceKey string, replace units.Threshold, reclaimKey string, reclaim units.Threshold, show func(units.Threshold) string) {
	rk, ck := k+"."+replaceKey, k+"."+reclaimKey
	ok := thresholdOK(ps, ck, reclaim)
	if !thresholdOK(ps, rk, replace) || !ok || replace.Percent != reclaim.Percent {
		return
	}
	if replace.Percent && replace.Pct > reclaim.Pct || !replace.Percent && replace.Amount > reclaim.Amount {
		ps.add(rk, []string{ck}, "%s is above %s %s: the sandbox would be declared for replacement before reclaim ran",
			show(replace), ck, show(reclaim))
	}
}

func thresholdOK(ps *problems, key string, t units.Threshold) bool {
	if t.Percent && !(t.Pct >= 0 && t.Pct <= 100) {
		ps.addf(key, "%v%% is not a percent between 0%% and 100%%", t.Pct)
		return false
	}
	return true
}

func validateReclaim(r *Reclaim, stateDir string, ps *problems) {
	kinds := CacheKinds()
	seenKind := map[string]int{}
	for i, kind := range r.AutoCaches {
		k := fmt.Sprintf("reclaim.auto_caches[%d]", i)
		if !slices.Contains(kinds, kind) {
			ps.addf(k, "unknown cache kind %q: want one of %s", kind, strings.Join(kinds, " "))
			continue
		}
		unique(ps, k, kind, "kind", "reclaim.auto_caches", i, seenKind)
	}
	for i, p := range r.Protect {
		absPath(ps, fmt.Sprintf("reclaim.protect[%d]", i), p, false)
	}
	notNegative(ps, "reclaim.min_age", r.MinAge)
	sizeOK(ps, "reclaim.headroom", r.Headroom)
	thresholdOK(ps, "reclaim.headroom_inodes", r.HeadroomInodes)
	notNegative(ps, "reclaim.cooldown", r.Cooldown)
	if r.MaxRunsPerHour < 1 {
		ps.addf("reclaim.max_runs_per_hour", "%d: want at least 1", r.MaxRunsPerHour)
	}
	notNegative(ps, "reclaim.lead_time", r.LeadTime)

	names, roots := map[string]int{}, map[string]int{}
	for i, c := range r.Caches {
		k := fmt.Sprintf("reclaim.cache[%d]", i)
		if nameOK(ps, k+".name", c.Name) {
			unique(ps, k+".name", c.Name, "name", "reclaim.cache", i, names)
		}
		if absPath(ps, k+".path", c.Path, false) {
			root := path.Clean(c.Path)
			unique(ps, k+".path", root, "path", "reclaim.cache", i, roots)
			if why := dangerousRoot(root, stateDir); why != "" {
				ps.addf(k+".path", "cache root %q %s", c.Path, why)
			}
			for j, p := range r.Protect {
				if path.IsAbs(p) && within(path.Clean(p), root) {
					ps.add(k+".path", nil, "cache root %q equals or contains the protected path %q (reclaim.protect[%d])", c.Path, p, j)
					break
				}
			}
		}
		commandOK(ps, k+".command", c.Command)
		oneOf(ps, k+".ladder", c.Ladder, LadderGC, LadderEntries, LadderAll)
	}
}

// validateOverlap refuses a cache root that is, contains or lies inside a site root: the
// ladder's whole-cache rung would delete the files of the site's running jobs.
func validateOverlap(c *Config, ps *problems) {
	for i, cc := range c.Reclaim.Caches {
		if !path.IsAbs(cc.Path) {
			continue
		}
		root := path.Clean(cc.Path)
		for j, s := range c.Sites {
			if !path.IsAbs(s.Path) {
				continue
			}
			sp := path.Clean(s.Path)
			if within(root, sp) || within(sp, root) {
				ps.add(fmt.Sprintf("reclaim.cache[%d].path", i), nil, "cache root %q overlaps the site root %q (site[%d].path): reclaim would delete its jobs' files", cc.Path, s.Path, j)
				break
			}
		}
	}
}

func validateSites(sites []Site, protect []string, stateDir string, ps *problems) {
	names, paths := map[string]int{}, map[string]int{}
	for i, s := range sites {
		k := fmt.Sprintf("site[%d]", i)
		if nameOK(ps, k+".name", s.Name) {
			unique(ps, k+".name", s.Name, "name", "site", i, names)
		}
		if absPath(ps, k+".path", s.Path, false) {
			p := path.Clean(s.Path)
			unique(ps, k+".path", p, "path", "site", i, paths)
			if why := dangerousRoot(p, stateDir); why != "" {
				ps.addf(k+".path", "site root %q %s", s.Path, why)
			}
			for j, pr := range protect {
				if path.IsAbs(pr) && within(p, path.Clean(pr)) {
					ps.addf(k+".path", "%q lies inside the protected path %q (reclaim.protect[%d])", s.Path, pr, j)
					break
				}
			}
		}
		if _, _, err := s.OwnerUID(); err != nil {
			ps.addf(k+".owner", "%v", err)
		}
		notNegative(ps, k+".max_age", s.MaxAge)
		notNegative(ps, k+".min_age", s.MinAge)
		if s.MaxFiles < 0 {
			ps.addf(k+".max_files", "%d must not be negative (0: no count limit)", s.MaxFiles)
		}
		sizeOK(ps, k+".max_bytes", s.MaxBytes)
		if s.DrainRate < 0 {
			ps.addf(k+".drain_rate", "%d must not be negative (0: no limit)", s.DrainRate)
		}
	}
}

func validateMounts(mounts []Mount, ps *problems) {
	names, paths := map[string]int{}, map[string]int{}
	for i, m := range mounts {
		k := fmt.Sprintf("mount[%d]", i)
		if nameOK(ps, k+".name", m.Name) {
			unique(ps, k+".name", m.Name, "name", "mount", i, names)
		}
		mp := ""
		if absPath(ps, k+".path", m.Path, false) {
			mp = path.Clean(m.Path)
			unique(ps, k+".path", mp, "path", "mount", i, paths)
		}
		durationWithin(ps, k+".probe_interval", m.ProbeInterval, MinProbeInterval, MaxProbeInterval)
		durationWithin(ps, k+".probe_timeout", m.ProbeTimeout, MinProbeInterval, MaxProbeInterval)
		commandOK(ps, k+".remount_command", m.RemountCommand)
		if m.RemountUnit != "" && len(m.RemountCommand) > 0 {
			ps.add(k+".remount_command", []string{k + ".remount_unit"}, "set remount_unit or remount_command, not both")
		}
		absPath(ps, k+".credential_file", m.CredentialFile, true)
		commandOK(ps, k+".refresh_command", m.RefreshCommand)
		if !(m.RefreshAt > 0 && m.RefreshAt < 1) {
			ps.addf(k+".refresh_at", "%v: want a fraction of the credential's lifetime strictly between 0 and 1, such as 0.8", m.RefreshAt)
		}
		if m.MaxRemountsPerHour < 0 {
			ps.addf(k+".max_remounts_per_hour", "%d must not be negative (0: never remount)", m.MaxRemountsPerHour)
		}
		durationWithin(ps, k+".remount_timeout", m.RemountTimeout, MinRemountTimeout, MaxRemountTimeout)
		for j, l := range m.Links {
			lk := fmt.Sprintf("%s.links[%d]", k, j)
			if absPath(ps, lk+".path", l.Path, false) && mp != "" && within(path.Clean(l.Path), mp) {
				ps.add(lk+".path", []string{lk}, "%q lies inside the mount %q: a link into a mount must live outside it", l.Path, m.Path)
			}
			absPath(ps, lk+".target", l.Target, false)
		}
	}
}

// within reports whether p is root or lies under it; both are clean absolute paths.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// absPath checks that p is an absolute path ("" passes when optional) and reports
// whether it is a non-empty absolute path.
func absPath(ps *problems, key, p string, optional bool) bool {
	switch {
	case p == "" && optional:
		return false
	case p == "":
		ps.addf(key, "must not be empty: want an absolute path")
	case !path.IsAbs(p):
		ps.addf(key, "%q is a relative path: want an absolute path", p)
	default:
		return true
	}
	return false
}

// unique reports a value already used by an earlier entry of the same list.
func unique(ps *problems, key, v, what, list string, i int, seen map[string]int) {
	if j, ok := seen[v]; ok {
		ps.addf(key, "%q is also the %s of %s[%d]; each must be unique", v, what, list, j)
		return
	}
	seen[v] = i
}

// nameOK checks a name that appears in launch calls, metric labels and events.
func nameOK(ps *problems, key, name string) bool {
	if err := CheckName(name); err != nil {
		ps.addf(key, "%v", err)
		return false
	}
	return true
}

// CheckName checks a site, cache or mount name (also of mounts registered at run time):
// it appears in launch calls, metric labels and events.
func CheckName(name string) error {
	ok := name != "" && len(name) <= 64 && isAlnum(name[0])
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%q: want 1 to 64 letters, digits, \".\", \"_\" or \"-\", starting with a letter or digit", name)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func commandOK(ps *problems, key string, argv []string) {
	if len(argv) > 0 && strings.TrimSpace(argv[0]) == "" {
		ps.addf(key, "the program (first element) is empty")
	}
}

func oneOf(ps *problems, key, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		ps.addf(key, "%q: want one of %s", v, strings.Join(allowed, " | "))
	}
}

// Bounds of the probe knobs (issue 21): a probe_interval of 1ns spun the watcher at 122%
// CPU; one of years overflowed the next probe's instant.
const (
	MinProbeInterval = 100 * time.Millisecond
	MaxProbeInterval = 24 * time.Hour
	// MaxJobLifetime bounds [jobs] max_lifetime, so that no lease instant overflows.
	MaxJobLifetime = 10 * 365 * 24 * time.Hour
)

// durationWithin requires lo <= d <= hi.
// The bounds of a [[mount]]'s remount_timeout (and a registration's): long enough for a
// FUSE server to start, short enough that a remount that cannot succeed is given up.
const (
	MinRemountTimeout = time.Second
	MaxRemountTimeout = time.Hour
)

func durationWithin(ps *problems, key string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		ps.addf(key, "%s: want a duration from %s to %s", d, lo, hi)
	}
}

func aboveZero(ps *problems, key string, d time.Duration) {
	if d <= 0 {
		ps.addf(key, "%s: want a duration above zero", d)
	}
}

func notNegative(ps *problems, key string, d time.Duration) {
	if d < 0 {
		ps.addf(key, "%s must not be negative", d)
	}
}

func sizeOK(ps *problems, key string, s api.Size) {
	if s < 0 {
		ps.addf(key, "%d must not be negative", int64(s))
	}
}
