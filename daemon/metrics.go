package daemon

import (
	"math"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandboxd/api"
)

// metrics is sandboxd's private registry. Gauges are read from the components'
// snapshots at scrape time; the only state kept here is what the HTTP layer counts.
// reg holds sandboxd's own series, all that the node_exporter textfile gets; the Go and
// process collectors live in runtime and only /metrics serves them (node_exporter has
// those families already and fails the gathering of a textfile that repeats them).
type metrics struct {
	reg            *prometheus.Registry
	runtime        *prometheus.Registry
	handler        http.Handler
	launchRequests *prometheus.CounterVec
	launchOK       prometheus.Counter // launchRequests{result="ok"}, resolved once
	launchDuration prometheus.Histogram
}

// latencyBuckets start at 10 µs: a launch takes tens of µs, and client_golang's default
// buckets start at 5 ms (FIELD-NOTES).
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2.5, 14)

func newMetrics(d *Daemon) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), runtime: prometheus.NewRegistry()}
	m.launchRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_launch_requests_total", Help: "Launch calls by result: ok or the error code of the refusal.",
	}, []string{"result"})
	for _, r := range append([]api.Code{"ok"}, api.Codes...) {
		m.launchRequests.WithLabelValues(string(r))
	}
	m.launchOK = m.launchRequests.WithLabelValues("ok")
	m.launchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sandboxd_launch_duration_seconds", Help: "Time to answer a launch call, from request decode to answer.",
		Buckets: latencyBuckets,
	})
	m.reg.MustRegister(m.launchRequests, m.launchDuration, &snapshotCollector{d: d}, &jobsCollector{d: d})
	m.runtime.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(prometheus.Gatherers{m.reg, m.runtime},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

func (m *metrics) launchDone(result string, start time.Time) {
	if result == "ok" {
		m.launchOK.Inc() // every answered launch: no label hashing (issue 27)
	} else {
		m.launchRequests.WithLabelValues(result).Inc()
	}
	m.launchDuration.Observe(time.Since(start).Seconds())
}

func (d *Daemon) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	d.metrics.handler.ServeHTTP(w, r)
	return nil
}

// snapshotCollector emits every series read from component snapshots.
type snapshotCollector struct{ d *Daemon }

// exported names every metric family sandboxd can export (desc adds each), so the
// tests of the alert rules and the dashboard can check they name only real series.
var exported = map[string]bool{
	"sandboxd_launch_requests_total": true, "sandboxd_launch_duration_seconds": true,
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	exported[name] = true
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descBuildInfo    = desc("sandboxd_build_info", "Build information; always 1.", "version", "revision", "goversion")
	descStartTime    = desc("sandboxd_start_time_seconds", "When this daemon process started (Unix time): its changes count restarts, in the textfile too, which has no process collector.")
	descMode         = desc("sandboxd_mode", "The daemon's mode (enforce or observe); 1 for the current mode.", "mode")
	descReloadOK     = desc("sandboxd_config_last_reload_successful", "Whether the last config load or reload succeeded.")
	descReloadTime   = desc("sandboxd_config_last_reload_success_timestamp_seconds", "When the config was last loaded successfully.")
	descTextfileIvl  = desc("sandboxd_textfile_interval_seconds", "[metrics] textfile_interval: SandboxdTextfileStale compares the textfile's age with it; 0 when the textfile is off.")
	fsLabels         = []string{"path", "mountpoint", "device", "fstype"}
	descFSSize       = desc("sandboxd_filesystem_size_bytes", "Filesystem size (blocks × f_frsize).", fsLabels...)
	descFSAvail      = desc("sandboxd_filesystem_avail_bytes", "Bytes available to unprivileged users.", fsLabels...)
	descFSFiles      = desc("sandboxd_filesystem_files", "Inodes in total; 0 means no inode limit.", fsLabels...)
	descFSFilesFree  = desc("sandboxd_filesystem_files_free", "Free inodes.", fsLabels...)
	descFSGrowth     = desc("sandboxd_filesystem_growth_bytes_per_second", "Rate at which writes consume space.", fsLabels...)
	descFSPredicted  = desc("sandboxd_filesystem_predicted_full_seconds", "Predicted seconds until full; +Inf when not filling.", fsLabels...)
	descFSReclaimThr = desc("sandboxd_filesystem_reclaim_threshold_bytes", "Effective (adaptive) reclaim threshold.", fsLabels...)
	descFSReplaceThr = desc("sandboxd_filesystem_replace_threshold_bytes", "Replace-the-sandbox threshold.", fsLabels...)
	descFSReserve    = desc("sandboxd_filesystem_reserve_bytes", "Bytes held by the emergency reserve file.", fsLabels...)
	descFSStale      = desc("sandboxd_filesystem_stale", "1 while statfs on the filesystem does not answer.", fsLabels...)
	descFSVerdict    = desc("sandboxd_filesystem_verdict", "The filesystem's one verdict (ok, low, replace; the word launch, resume, status and check say): 1 for the current one.", append(fsLabels[:4:4], "verdict")...)
	descCondition    = desc("sandboxd_condition", "Health conditions: 1 while active.", "type", "subject")
	descSiteFiles    = desc("sandboxd_site_files", "Entries in the site.", "site")
	descSiteBytes    = desc("sandboxd_site_bytes", "Bytes held by the site's entries.", "site")
	descSiteOldest   = desc("sandboxd_site_oldest_age_seconds", "Age of the site's oldest job.", "site")
	descSitePending  = desc("sandboxd_site_pending_prune", "Expired files not yet pruned.", "site")
	descSitePruned   = desc("sandboxd_site_pruned_files_total", "Files pruned from the site, by reason.", "site", "reason")
)

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	gauge := func(dsc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(dsc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(dsc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(dsc, prometheus.CounterValue, v, labels...)
	}
	gauge(descBuildInfo, 1, d.opts.Version, d.opts.Commit, runtime.Version())
	gauge(descStartTime, float64(d.started.UnixNano())/1e9)
	gauge(descMode, 1, d.config().Server.Mode)
	ok, at := d.reloads.get()
	gauge(descReloadOK, b2f(ok))
	gauge(descReloadTime, float64(at.UnixNano())/1e9)
	if m := d.config().Metrics; m.Textfile != "" {
		gauge(descTextfileIvl, m.TextfileInterval.Seconds())
	} else {
		gauge(descTextfileIvl, 0)
	}

	comps := d.current()
	for _, fs := range comps.pressure.Snapshot() {
		if fs.SampledAt.IsZero() {
			continue // no fake zeros before the first sample
		}
		l := []string{fs.Path, fs.Mountpoint, fs.Device, fs.FSType}
		gauge(descFSSize, float64(fs.SizeBytes), l...)
		gauge(descFSAvail, float64(fs.AvailBytes), l...)
		gauge(descFSFiles, float64(fs.Files), l...)
		gauge(descFSFilesFree, float64(fs.FilesFree), l...)
		gauge(descFSGrowth, fs.GrowthBytesPerSecond, l...)
		pred := math.Inf(1)
		if fs.PredictedFullSeconds != nil {
			pred = *fs.PredictedFullSeconds
		}
		gauge(descFSPredicted, pred, l...)
		gauge(descFSReclaimThr, float64(fs.ReclaimThresholdBytes), l...)
		gauge(descFSReplaceThr, float64(fs.ReplaceThresholdBytes), l...)
		gauge(descFSReserve, float64(fs.ReserveBytes), l...)
		gauge(descFSStale, b2f(fs.Stale), l...)
		if v := fs.Judge(); v != "" {
			for _, w := range []string{api.VerdictOK, api.VerdictLow, api.VerdictReplace} {
				gauge(descFSVerdict, b2f(w == v), append(l[:4:4], w)...)
			}
		}
	}
	for _, cond := range d.conditions() {
		gauge(descCondition, b2f(cond.Status), cond.Type, cond.Subject)
	}
	for _, s := range comps.sites.Snapshot() {
		gauge(descSiteFiles, float64(s.Files), s.Name)
		gauge(descSiteBytes, float64(s.Bytes), s.Name)
		gauge(descSiteOldest, s.OldestAgeSeconds, s.Name)
		gauge(descSitePending, float64(s.PendingPrune), s.Name)
	}
	totals := comps.sites.PrunedTotals()
	for _, name := range comps.sites.SiteNames() {
		for _, reason := range []string{"age", "count", "bytes"} {
			counter(descSitePruned, float64(totals[name][reason]), name, reason)
		}
	}
	c.collectReclaim(ch, comps)
	c.collectMounts(ch, comps)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
