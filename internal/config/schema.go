package config

import (
	"time"

	"github.com/sandboxd/sandboxd/internal/units"
)

// The schema: every key of the file and how it decodes. A test checks it against the
// toml tags of the Config types, so neither can drift from the other.

func topFields(c *Config) []field {
	return []field{
		{"version", func(_ *decoder, _ string, v any) error {
			var n int64
			if err := integer(&n)(nil, "", v); err != nil {
				return err
			}
			c.Version = int(n)
			return nil
		}},
		{"server", subTable(func() []field { return serverFields(&c.Server) })},
		{"log", subTable(func() []field { return logFields(&c.Log) })},
		{"metrics", subTable(func() []field { return metricsFields(&c.Metrics) })},
		{"health", subTable(func() []field { return healthFields(&c.Health) })},
		{"launch", subTable(func() []field { return launchFields(&c.Launch) })},
		{"filesystem", entries(&c.Filesystems, DefaultFilesystem, filesystemFields, "path")},
		{"site", entries(&c.Sites, DefaultSite, siteFields, "name", "path")},
		{"reclaim", subTable(func() []field { return reclaimFields(&c.Reclaim) })},
		{"mount", entries(&c.Mounts, DefaultMount, mountFields, "name", "path")},
		{"mounts", subTable(func() []field { return runtimeMountsFields(&c.RuntimeMounts) })},
		{"jobs", subTable(func() []field { return jobsFields(&c.Jobs) })},
	}
}

func serverFields(s *Server) []field {
	return []field{
		{"socket", pathStr(&s.Socket)},
		{"socket_mode", fileMode(&s.SocketMode)},
		{"socket_group", str(&s.SocketGroup)},
		{"writers", strList(&s.Writers)},
		{"http", str(&s.HTTP)},
		{"state_dir", pathStr(&s.StateDir)},
		{"mode", str(&s.Mode)},
	}
}

func logFields(l *Log) []field {
	return []field{{"level", str(&l.Level)}, {"format", str(&l.Format)}}
}

func metricsFields(m *Metrics) []field {
	return []field{
		{"textfile", pathStr(&m.Textfile)},
		{"textfile_interval", duration(&m.TextfileInterval)},
	}
}

func healthFields(h *Health) []field {
	return []field{
		{"transition_period", duration(&h.TransitionPeriod)},
		{"sample_interval", duration(&h.SampleInterval)},
	}
}

func launchFields(l *Launch) []field {
	return []field{
		{"deadline", duration(&l.Deadline)},
		{"need_bytes", size(&l.NeedBytes)},
		{"need_inodes", count(&l.NeedInodes)},
	}
}

func filesystemFields(f *Filesystem) []field {
	return []field{
		{"path", pathStr(&f.Path)},
		{"reclaim_below", bytesThreshold(&f.ReclaimBelow)},
		{"replace_below", bytesThreshold(&f.ReplaceBelow)},
		{"reclaim_below_inodes", countThreshold(&f.ReclaimBelowInodes)},
		{"replace_below_inodes", countThreshold(&f.ReplaceBelowInodes)},
		{"reserve", size(&f.Reserve)},
		{"reserve_path", pathStr(&f.ReservePath)},
		{"warn_time_to_full", duration(&f.WarnTimeToFull)},
		{"size_setting", str(&f.SizeSetting)},
	}
}

func siteFields(s *Site) []field {
	return []field{
		{"name", str(&s.Name)},
		{"path", pathStr(&s.Path)},
		{"owner", str(&s.Owner)},
		{"max_age", duration(&s.MaxAge)},
		{"min_age", duration(&s.MinAge)},
		{"max_files", integer(&s.MaxFiles)},
		{"max_bytes", size(&s.MaxBytes)},
		{"drain_rate", integer(&s.DrainRate)},
	}
}

func reclaimFields(r *Reclaim) []field {
	return []field{
		{"auto_caches", strList(&r.AutoCaches)},
		{"protect", pathList(&r.Protect)},
		{"min_age", duration(&r.MinAge)},
		{"headroom", size(&r.Headroom)},
		{"headroom_inodes", countThreshold(&r.HeadroomInodes)},
		{"cooldown", duration(&r.Cooldown)},
		{"max_runs_per_hour", integer(&r.MaxRunsPerHour)},
		{"lead_time", duration(&r.LeadTime)},
		{"offline", boolean(&r.Offline)},
		{"cache", entries(&r.Caches, DefaultCache, cacheFields, "name", "path")},
	}
}

func cacheFields(c *Cache) []field {
	return []field{
		{"name", str(&c.Name)},
		{"path", pathStr(&c.Path)},
		{"command", strList(&c.Command)},
		{"order", integer(&c.Order)},
		{"ladder", str(&c.Ladder)},
	}
}

func mountFields(m *Mount) []field {
	return []field{
		{"name", str(&m.Name)},
		{"path", pathStr(&m.Path)},
		{"required", boolean(&m.Required)},
		{"probe_interval", duration(&m.ProbeInterval)},
		{"probe_timeout", duration(&m.ProbeTimeout)},
		{"canary", boolean(&m.Canary)},
		{"remount_unit", str(&m.RemountUnit)},
		{"remount_command", strList(&m.RemountCommand)},
		{"credential_file", pathStr(&m.CredentialFile)},
		{"refresh_command", strList(&m.RefreshCommand)},
		{"refresh_at", float(&m.RefreshAt)},
		{"max_remounts_per_hour", integer(&m.MaxRemountsPerHour)},
		{"remount_timeout", duration(&m.RemountTimeout)},
		{"links", entries(&m.Links, func() Link { return Link{} }, linkFields, "path", "target")},
		{"guard", boolean(&m.Guard)},
		{"push_uids", uidList(&m.PushUIDs)},
	}
}

func runtimeMountsFields(r *RuntimeMounts) []field {
	return []field{{"max_registered", integer(&r.MaxRegistered)}, {"max_registered_per_uid", integer(&r.MaxPerUID)}}
}

func linkFields(l *Link) []field {
	return []field{{"path", pathStr(&l.Path)}, {"target", pathStr(&l.Target)}}
}

// Per-entry defaults: what each key of an array entry takes when the entry leaves it
// out. They are the values default.toml shows (tests hold the two together).

// DefaultFilesystem is a [[filesystem]] entry with every key but path at its default.
func DefaultFilesystem() Filesystem {
	return Filesystem{
		ReclaimBelow:       units.Threshold{Amount: 3 << 29},   // 1.5GiB
		ReplaceBelow:       units.Threshold{Amount: 256 << 20}, // docs/policy.md, row #5 against #3
		ReclaimBelowInodes: units.Threshold{Pct: 5, Percent: true},
		ReplaceBelowInodes: units.Threshold{Pct: 1, Percent: true},
		Reserve:            256 << 20,
		WarnTimeToFull:     time.Hour,
	}
}

// DefaultSite is a [[site]] entry with every key but name and path at its default.
func DefaultSite() Site {
	return Site{MaxAge: 12 * time.Hour, MinAge: 15 * time.Minute, DrainRate: 500}
}

// DefaultCache is a [[reclaim.cache]] entry with every key but name and path at its default.
func DefaultCache() Cache {
	return Cache{Order: 20, Ladder: LadderAll}
}

// DefaultMount is a [[mount]] entry with every key but name and path at its default.
func DefaultMount() Mount {
	return Mount{
		Required:           true,
		ProbeInterval:      5 * time.Second,
		ProbeTimeout:       5 * time.Second,
		Canary:             true,
		RefreshAt:          0.8,
		MaxRemountsPerHour: 6,
		RemountTimeout:     time.Minute,
	}
}

func jobsFields(j *Jobs) []field {
	return []field{
		{"cgroup_root", pathStr(&j.CgroupRoot)},
		{"default_ttl", duration(&j.DefaultTTL)},
		{"max_lifetime", duration(&j.MaxLifetime)},
		{"grace", duration(&j.Grace)},
		{"unleased_max", duration(&j.UnleasedMax)},
		{"keep_ended", duration(&j.KeepEnded)},
		{"keep_ended_max", integer(&j.KeepEndedMax)},
		{"registry_dir", pathStr(&j.RegistryDir)},
		{"max_per_uid", integer(&j.MaxPerUID)},
	}
}
