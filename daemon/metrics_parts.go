package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/api"
)

var (
	descReclaimRuns    = desc("sandboxd_reclaim_runs_total", "Reclaim runs by trigger and verdict.", "trigger", "verdict")
	descReclaimBytes   = desc("sandboxd_reclaim_freed_bytes_total", "Bytes freed by reclaim, by source.", "source")
	descReclaimFiles   = desc("sandboxd_reclaim_freed_files_total", "Files freed by reclaim, by source.", "source")
	descReclaimActions = desc("sandboxd_reclaim_actions_total", "Reclaim actions by kind and status.", "kind", "status")
	// CacheThrashing (issue 28): a cache that refills after each prune, and what came back.
	descCacheThrashing = desc("sandboxd_cache_thrashing", "1 while the cache refilled at least half of what each of its last 3 prunes freed within an hour (CacheThrashing): it is pruned last.", "cache")
	descCacheRefilled  = desc("sandboxd_cache_refilled_bytes_total", "Bytes that came back within an hour after prunes of the cache (downloaded again), each prune counted up to what it freed.", "cache")
	descMountHealthy   = desc("sandboxd_mount_healthy", "1 while the mount probes healthy; required is the mount's required setting, so only required mounts page.", "mount", "mountpoint", "fstype", "required")
	descMountProbe     = desc("sandboxd_mount_probe_duration_seconds", "Duration of mount probes.", "mount")
	descMountFailures  = desc("sandboxd_mount_failures_total", "Failed probe rounds by state.", "mount", "state")
	descMountRemounts  = desc("sandboxd_mount_remounts_total", "Remounts by result.", "mount", "result")
	descMountUnhealthy = desc("sandboxd_mount_unhealthy_seconds_total", "Seconds the mount spent unhealthy.", "mount")
	descMountCredExp   = desc("sandboxd_mount_credential_expiry_timestamp_seconds", "When the mount's credential expires.", "mount", "required")
	descMountRefreshes = desc("sandboxd_mount_credential_refreshes_total", "Credential refreshes by result.", "mount", "result")
)

func (c *snapshotCollector) collectReclaim(ch chan<- prometheus.Metric, comps *components) {
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	rc := comps.reclaim.Counters()
	for k, v := range rc.Runs {
		counter(descReclaimRuns, float64(v), k.Trigger, k.Verdict)
	}
	// Every source reclaim can count under exists from start-up, at zero: each cache
	// (named as its actions are), each site's prune ("site:NAME"), and the reserve.
	sources := map[string]bool{}
	for s := range rc.FreedBytes {
		sources[s] = true
	}
	for _, ci := range comps.reclaim.Caches() {
		sources[ci.Source()] = true
	}
	for _, name := range comps.sites.SiteNames() {
		sources["site:"+name] = true
	}
	if comps.reclaim.HasReserves() {
		sources["reserve"] = true
	}
	for s := range sources {
		counter(descReclaimBytes, float64(rc.FreedBytes[s]), s)
		counter(descReclaimFiles, float64(rc.FreedFiles[s]), s)
	}
	for k, v := range rc.Actions {
		counter(descReclaimActions, float64(v), k.Kind, k.Status)
	}
	for _, cr := range comps.reclaim.Refills() {
		ch <- prometheus.MustNewConstMetric(descCacheThrashing, prometheus.GaugeValue, b2f(cr.Thrashing), cr.Name)
		counter(descCacheRefilled, float64(cr.RefilledBytes), cr.Name)
	}
}

func (c *snapshotCollector) collectMounts(ch chan<- prometheus.Metric, comps *components) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	snap := comps.mounts.Snapshot()
	for _, m := range snap {
		if m.LastProbeAt != nil || m.State == api.MountMissing {
			gauge(descMountHealthy, b2f(m.State == api.MountHealthy), m.Name, m.Path, m.FSType, strconv.FormatBool(m.Required))
		}
		if m.CredentialExpiresAt != nil {
			gauge(descMountCredExp, float64(m.CredentialExpiresAt.UnixNano())/1e9, m.Name, strconv.FormatBool(m.Required))
		}
	}
	mc := comps.mounts.Counters()
	for name, states := range mc.Failures {
		for s, v := range states {
			counter(descMountFailures, float64(v), name, s)
		}
	}
	for name, results := range mc.Remounts {
		for r, v := range results {
			counter(descMountRemounts, float64(v), name, r)
		}
	}
	for name, results := range mc.Refreshes {
		for r, v := range results {
			counter(descMountRefreshes, float64(v), name, r)
		}
	}
	for name, v := range mc.UnhealthySeconds {
		counter(descMountUnhealthy, v, name)
	}
	for name, h := range mc.ProbeDurations {
		ch <- prometheus.MustNewConstHistogram(descMountProbe, h.Count, h.Sum, h.Buckets, name)
	}
}
