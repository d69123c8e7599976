package daemon

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// The Speed figures of issue 5, measured on a real daemon watching test FUSE mounts at the
// default probe_interval and probe_timeout (5 s). Run as root:
//
//	go test -run '^$' -bench Mount -benchtime 3x -timeout 30m ./daemon/
//
// docs/benchmarks-mounts.md has the figures, targets and verdicts. Each iteration starts
// its own daemon and servers; every mount is cleaned up by fusetest even on failure.

const defaultInterval = 5 * time.Second

// benchDaemon runs a daemon for mounts with the default sample interval (the harness's
// 100 ms would inflate the CPU figures), probing through this binary or, when
// SANDBOXD_BENCH_PROBE_BIN is set, through that one (bin/sandboxd).
func benchDaemon(b *testing.B, mounts ...mountSpec) *testDaemon {
	b.Helper()
	body := noSites(b.TempDir())
	for _, m := range mounts {
		body += m.toml()
	}
	return startDaemon(b, body, probeSelf, func(o *Options) {
		o.Config.Health.SampleInterval = time.Second
		if bin := os.Getenv("SANDBOXD_BENCH_PROBE_BIN"); bin != "" {
			o.ProbeCommand = []string{bin, "mount-probe"} // e.g. bin/sandboxd, as in production
		}
	})
}

// stopNow stops the daemon at once and leaves its result for the cleanup's stop, so the
// next iteration does not share the machine with it.
func stopNow(td *testDaemon) {
	td.cancel()
	select {
	case err := <-td.done:
		td.done <- err
	case <-time.After(time.Minute):
	}
}

// eventAt is the time of the first event of kind whose message contains substr at or
// after after.
func eventAt(evs []api.Event, kind, substr string, after time.Time) (time.Time, bool) {
	for _, e := range evs {
		if e.Kind == kind && strings.Contains(e.Message, substr) && !e.Time.Before(after) {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// stats are the mean and max of a series.
func stats(xs []float64) (mean, max float64) {
	for _, x := range xs {
		mean += x
		if x > max {
			max = x
		}
	}
	if len(xs) > 0 {
		mean /= float64(len(xs))
	}
	return mean, max
}

// BenchmarkMountDenialRemount: static credentials expire at a random phase of the probe
// schedule; remount_command restarts the server with fresh keys. The denial window runs
// from the expiry (the first instant a caller gets EACCES) to the daemon's healthy
// verdict; the remount's own time from its "remounting" verdict to its "remounted" event.
func BenchmarkMountDenialRemount(b *testing.B) {
	var denial, detect, remount []float64
	for i := 0; i < b.N; i++ {
		mnt := mountDir(b, "agent")
		cred := filepath.Join(b.TempDir(), "cred.json")
		expiry := time.Now().Add(3*time.Second + rand.N(defaultInterval))
		if err := fusetest.WriteCred(cred, expiry); err != nil {
			b.Fatal(err)
		}
		srv := fusetest.Start(b, mnt, fusetest.Options{Credential: cred})
		td := benchDaemon(b, mountSpec{name: "agent", path: mnt, interval: defaultInterval, timeout: defaultInterval,
			canary: true, cred: cred, remount: srv.RemountCommand(time.Hour)})
		var healthyAt, deniedAt, remountingAt, remountedAt time.Time
		poll(b, 60*time.Second, "denied, remounted and healthy", func() bool {
			evs := td.events(b)
			var ok1, ok2, ok3, ok4 bool
			deniedAt, ok1 = eventAt(evs, api.EventMountProbe, "is denied", expiry)
			remountingAt, ok2 = eventAt(evs, api.EventMountProbe, "is remounting", expiry)
			remountedAt, ok3 = eventAt(evs, api.EventRemount, "remounted agent", expiry)
			healthyAt, ok4 = eventAt(evs, api.EventMountProbe, "is healthy", remountingAt)
			return ok1 && ok2 && ok3 && ok4
		})
		denial = append(denial, healthyAt.Sub(expiry).Seconds())
		detect = append(detect, deniedAt.Sub(expiry).Seconds())
		remount = append(remount, remountedAt.Sub(remountingAt).Seconds())
		b.Logf("iteration %d: denied %.2fs after expiry, remount took %.2fs, healthy %.2fs after expiry",
			i, deniedAt.Sub(expiry).Seconds(), remountedAt.Sub(remountingAt).Seconds(), healthyAt.Sub(expiry).Seconds())
		stopNow(td)
	}
	dm, dx := stats(denial)
	rm, rx := stats(remount)
	tm, _ := stats(detect)
	b.ReportMetric(dm, "denial-s")
	b.ReportMetric(dx, "denial-max-s")
	b.ReportMetric(tm, "detect-s")
	b.ReportMetric(rm, "remount-s")
	b.ReportMetric(rx, "remount-max-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMountRefreshDenial: a credential of 10 s lifetime, refreshed by refresh_command
// at the default refresh_at (0.8), for 30 s of wall time (three lifetimes). A client
// looks up a random name in the mount every 100 ms; every EACCES it gets counts as
// 100 ms of denial (target: none).
func BenchmarkMountRefreshDenial(b *testing.B) {
	const lifetime, window, every = 10 * time.Second, 30 * time.Second, 100 * time.Millisecond
	var deniedSecs, refreshes []float64
	for i := 0; i < b.N; i++ {
		mnt := mountDir(b, "agent")
		cred := filepath.Join(b.TempDir(), "cred.json")
		if err := fusetest.WriteCred(cred, time.Now().Add(lifetime)); err != nil {
			b.Fatal(err)
		}
		fusetest.Start(b, mnt, fusetest.Options{Credential: cred, Reload: true})
		td := benchDaemon(b, mountSpec{name: "agent", path: mnt, interval: defaultInterval, timeout: defaultInterval,
			canary: true, cred: cred, refresh: fusetest.RefreshCommand(cred, lifetime)})
		denied, other := 0, 0
		for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(every) {
			_, err := os.Lstat(filepath.Join(mnt, ".bench-"+strconv.Itoa(rand.Int())))
			switch {
			case errors.Is(err, syscall.EACCES):
				denied++
			case err != nil && !errors.Is(err, os.ErrNotExist):
				other++
			}
		}
		n := len(td.eventsWith(b, api.EventCredential, "credentials refreshed"))
		deniedSecs = append(deniedSecs, float64(denied)*every.Seconds())
		refreshes = append(refreshes, float64(n))
		b.Logf("iteration %d: %d EACCES answers, %d other errors, %d refreshes in %v", i, denied, other, n, window)
		stopNow(td)
	}
	dm, dx := stats(deniedSecs)
	rm, _ := stats(refreshes)
	b.ReportMetric(dm, "denial-s")
	b.ReportMetric(dx, "denial-max-s")
	b.ReportMetric(rm, "refreshes")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMountHung: the server stops answering; /livez is asked every 20 ms from the
// hang until the daemon's healthy verdict after the abort and remount.
func BenchmarkMountHung(b *testing.B) {
	var recover []float64
	var all []time.Duration
	for i := 0; i < b.N; i++ {
		mnt := mountDir(b, "agent")
		srv := fusetest.Start(b, mnt, fusetest.Options{})
		td := benchDaemon(b, mountSpec{name: "agent", path: mnt, interval: defaultInterval, timeout: defaultInterval,
			canary: true, remount: srv.RemountCommand(0)})
		td.waitMountState(b, "agent", api.MountHealthy)
		// Hang at a random phase of the probe schedule.
		time.Sleep(rand.N(defaultInterval))
		lp := startLivez(td, 20*time.Millisecond)
		hungAt := time.Now()
		srv.Hang()
		var healthyAt time.Time
		poll(b, 90*time.Second, "hung, aborted, remounted and healthy", func() bool {
			evs := td.events(b)
			_, ok1 := eventAt(evs, api.EventRemount, "remounted agent", hungAt)
			abortAt, ok2 := eventAt(evs, api.EventMountAbort, "aborted hung connection", hungAt)
			var ok3 bool
			healthyAt, ok3 = eventAt(evs, api.EventMountProbe, "is healthy", abortAt)
			return ok1 && ok2 && ok3
		})
		lat, bad := lp.finish()
		if len(bad) > 0 {
			b.Fatalf("/livez failed %d times while hung: %s", len(bad), bad[0])
		}
		all = append(all, lat...)
		recover = append(recover, healthyAt.Sub(hungAt).Seconds())
		b.Logf("iteration %d: healthy %.2fs after the hang; /livez %d answers, p50 %v p99 %v max %v", i,
			healthyAt.Sub(hungAt).Seconds(), len(lat), quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1])
		stopNow(td)
	}
	sortDurations(all)
	rm, rx := stats(recover)
	b.ReportMetric(rm, "hung-to-healthy-s")
	b.ReportMetric(rx, "hung-to-healthy-max-s")
	b.ReportMetric(float64(quantile(all, 0.5).Microseconds())/1000, "livez-p50-ms")
	b.ReportMetric(float64(quantile(all, 0.99).Microseconds())/1000, "livez-p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "livez-max-ms")
	b.ReportMetric(0, "ns/op")
}

func sortDurations(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

// cpuTicks reads this process's user+system time, and that of its children: the reaped
// ones (cutime+cstime of /proc/self/stat, the per-probe children of old) plus the live
// ones (the long-lived probe servers, whose time reaches cutime only when they exit), in
// clock ticks (USER_HZ, 100 here).
func cpuTicks(b *testing.B) (self, children int64) {
	f := statFields(b, "/proc/self/stat")
	// After the command: state is field 3, so utime (14) is f[11] ... cstime (17) is f[14].
	n := func(f []string, i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	self, children = n(f, 11)+n(f, 12), n(f, 13)+n(f, 14)
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		if cf := statFields(nil, p); len(cf) > 14 && cf[1] == me { // f[1] is the parent pid
			children += n(cf, 11) + n(cf, 12)
		}
	}
	return self, children
}

// statFields are the fields of a /proc/PID/stat after the command; nil when unreadable
// (b nil: a process that just exited).
func statFields(b *testing.B, path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		if b != nil {
			b.Fatal(err)
		}
		return nil
	}
	s := string(raw)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// BenchmarkMountCPU: the daemon probing three mounts every 5 s with canaries, for
// SANDBOXD_BENCH_CPU_SECONDS (default 60) of wall time; CPU of this process (the daemon
// runs in it; the benchmark itself only sleeps) and of its probe children, as a share of
// one core. "no-mounts" is the same daemon without mounts, for the baseline.
func BenchmarkMountCPU(b *testing.B) {
	window := 60 * time.Second
	if v, err := strconv.Atoi(os.Getenv("SANDBOXD_BENCH_CPU_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	for _, n := range []int{3, 0} {
		name := fmt.Sprintf("mounts=%d", n)
		b.Run(name, func(b *testing.B) {
			var total, kids []float64
			for i := 0; i < b.N; i++ {
				var specs []mountSpec
				for j := 0; j < n; j++ {
					mnt := mountDir(b, fmt.Sprintf("m%d", j))
					fusetest.Start(b, mnt, fusetest.Options{})
					specs = append(specs, mountSpec{name: fmt.Sprintf("m%d", j), path: mnt, interval: defaultInterval,
						timeout: defaultInterval, canary: true})
				}
				td := benchDaemon(b, specs...)
				for _, s := range specs {
					td.waitMountState(b, s.name, api.MountHealthy)
				}
				self0, kids0 := cpuTicks(b)
				start := time.Now()
				time.Sleep(window)
				self1, kids1 := cpuTicks(b)
				wall := time.Since(start).Seconds()
				t := float64(self1-self0+kids1-kids0) / 100 / wall * 100
				k := float64(kids1-kids0) / 100 / wall * 100
				total, kids = append(total, t), append(kids, k)
				for _, s := range specs {
					if m := td.mount(b, s.name); m.State != api.MountHealthy {
						b.Fatalf("mount %s is %s after the window", s.name, m.State)
					}
				}
				b.Logf("%s: %.3f%% of a core over %.0fs (probe children %.3f%%)", name, t, wall, k)
				stopNow(td)
			}
			tm, tx := stats(total)
			km, _ := stats(kids)
			b.ReportMetric(tm, "cpu-%core")
			b.ReportMetric(tx, "cpu-max-%core")
			b.ReportMetric(km, "children-%core")
			b.ReportMetric(0, "ns/op")
		})
	}
}
