package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// The Figures of issue 12 (runtime mounts), on a real daemon at its defaults
// (probe_interval and probe_timeout 5 s, canary on, refresh_at 0.8) watching mounts
// registered through the API and served by internal/fusetest. Run as root:
//
//	go test -run '^$' -bench Registered -benchtime 1x -timeout 30m ./daemon/
//
// (scripts/bench.sh runs them in `make bench`; docs/benchmarks-mounts.md has the figures.)

// registerDefaults is a registration at the [[mount]] defaults.
func registerDefaults(b *testing.B, td *testDaemon, req api.MountRegistration) {
	b.Helper()
	if code, body := register(b, td, req); code != 201 {
		b.Fatalf("register %s: %d %s", req.Name, code, body)
	}
}

// BenchmarkRegisteredFirstProbe: POST /v1/mounts → the first GET /v1/mounts/{name} that
// answers healthy (asked every 2 ms), for 20 registrations of fresh mounts, p50 and max.
// Beside it, the physical floor: one probe child (the same canary probe) run directly.
func BenchmarkRegisteredFirstProbe(b *testing.B) {
	const n = 20
	var lat, floor []time.Duration
	for i := 0; i < b.N; i++ {
		td := benchDaemon(b)
		for j := 0; j < n; j++ {
			mnt := mountDir(b, fmt.Sprintf("s%d", j))
			fusetest.Start(b, mnt, fusetest.Options{})
			name := fmt.Sprintf("sess-%d-%d", i, j)
			start := time.Now()
			registerDefaults(b, td, api.MountRegistration{Name: name, Path: mnt})
			for {
				_, _, body := td.do(b, "GET", "/v1/mounts/"+name, "")
				var m api.Mount
				if json.Unmarshal([]byte(body), &m) == nil && m.State == api.MountHealthy {
					break
				}
				if time.Since(start) > 30*time.Second {
					b.Fatalf("%s not healthy after 30s: %s", name, body)
				}
				time.Sleep(2 * time.Millisecond)
			}
			lat = append(lat, time.Since(start))
			floor = append(floor, probeDirect(b, td, mnt))
		}
		stopNow(td)
	}
	sortDurations(lat)
	sortDurations(floor)
	b.Logf("registration → healthy: p50 %v, max %v over %d; one probe child run directly: p50 %v",
		quantile(lat, 0.5), lat[len(lat)-1], len(lat), quantile(floor, 0.5))
	b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "first-healthy-p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "first-healthy-max-ms")
	b.ReportMetric(float64(quantile(floor, 0.5).Microseconds())/1000, "probe-child-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// probeDirect runs the daemon's probe child once on mnt, as the daemon does, and answers
// how long it took.
func probeDirect(b *testing.B, td *testDaemon, mnt string) time.Duration {
	argv := append(append([]string(nil), td.d.opts.ProbeCommand...), "--path", mnt, "--canary")
	start := time.Now()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		b.Fatalf("probe child: %v %s", err, out)
	}
	return time.Since(start)
}

// BenchmarkRegisteredDenial: the credential-expiry denial window of a registered mount
// without a refresh command, seen by a client that looks up a random name in the mount
// every 100 ms (each EACCES counts 100 ms).
//
//   - pushed: 10 s credentials; the runner re-signs at 80 % of the lifetime (rewrites the
//     file the server reads) and pushes the new expiry with PUT .../credentials, for 30 s.
//   - remount: static 5 s credentials that nobody renews, registered with their expiry and a
//     remount_command that restarts the server with fresh ones; the window from the expiry
//     to the healthy verdict, from the events.
//   - configured-remount: the same as a [[mount]] of the config file with credential_file,
//     the issue 5 path, side by side.
func BenchmarkRegisteredDenial(b *testing.B) {
	b.Run("pushed", func(b *testing.B) {
		const lifetime, window, every = 10 * time.Second, 30 * time.Second, 100 * time.Millisecond
		var denied []float64
		for i := 0; i < b.N; i++ {
			mnt := mountDir(b, "agent")
			cred := filepath.Join(b.TempDir(), "cred.json")
			exp := time.Now().Add(lifetime)
			fusetest.WriteCred(cred, exp)
			fusetest.Start(b, mnt, fusetest.Options{Credential: cred, Reload: true})
			td := benchDaemon(b)
			registerDefaults(b, td, api.MountRegistration{Name: "agent", Path: mnt, CredentialExpiresAt: &exp})
			td.waitMountState(b, "agent", api.MountHealthy)
			n, pushes := 0, 0
			next := time.Now().Add(lifetime * 8 / 10)
			for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(every) {
				if time.Now().After(next) { // the runner re-signs and pushes
					exp = time.Now().Add(lifetime)
					fusetest.WriteCred(cred, exp)
					body, _ := json.Marshal(api.CredentialPush{ExpiresAt: &exp})
					if code, _, out := td.do(b, "PUT", "/v1/mounts/agent/credentials", string(body)); code != 200 {
						b.Fatalf("push: %d %s", code, out)
					}
					pushes++
					next = time.Now().Add(lifetime * 8 / 10)
				}
				if _, err := os.Lstat(filepath.Join(mnt, ".bench-"+strconv.Itoa(rand.Int()))); errors.Is(err, syscall.EACCES) {
					n++
				}
			}
			denied = append(denied, float64(n)*every.Seconds())
			b.Logf("iteration %d: %d EACCES answers in %v, %d pushes", i, n, window, pushes)
			stopNow(td)
		}
		m, x := stats(denied)
		b.ReportMetric(m, "denial-s")
		b.ReportMetric(x, "denial-max-s")
		b.ReportMetric(0, "ns/op")
	})
	remount := func(b *testing.B, configured bool) {
		var windows []float64
		for i := 0; i < b.N; i++ {
			mnt := mountDir(b, "agent")
			cred := filepath.Join(b.TempDir(), "cred.json")
			exp := time.Now().Add(3*time.Second + rand.N(defaultInterval)).Truncate(time.Second)
			fusetest.WriteCred(cred, exp)
			srv := fusetest.Start(b, mnt, fusetest.Options{Credential: cred})
			var td *testDaemon
			if configured {
				td = benchDaemon(b, mountSpec{name: "agent", path: mnt, interval: defaultInterval, timeout: defaultInterval,
					canary: true, cred: cred, remount: srv.RemountCommand(time.Hour)})
			} else {
				td = benchDaemon(b)
				registerDefaults(b, td, api.MountRegistration{Name: "agent", Path: mnt, CredentialExpiresAt: &exp,
					RemountCommand: srv.RemountCommand(time.Hour)})
			}
			var healthyAt time.Time
			poll(b, 60*time.Second, "denied, remounted and healthy", func() bool {
				evs := td.events(b)
				remountingAt, ok1 := eventAt(evs, api.EventMountProbe, "is remounting", exp)
				var ok2 bool
				healthyAt, ok2 = eventAt(evs, api.EventMountProbe, "is healthy", remountingAt)
				return ok1 && ok2
			})
			windows = append(windows, healthyAt.Sub(exp).Seconds())
			b.Logf("iteration %d: healthy %.2fs after the expiry", i, healthyAt.Sub(exp).Seconds())
			stopNow(td)
		}
		m, x := stats(windows)
		b.ReportMetric(m, "denial-s")
		b.ReportMetric(x, "denial-max-s")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("remount", func(b *testing.B) { remount(b, false) })
	b.Run("configured-remount", func(b *testing.B) { remount(b, true) })
}

// BenchmarkRegisteredCPU: the daemon with 50 registered mounts probed at the default
// interval (5 s, canary on) for SANDBOXD_BENCH_CPU_SECONDS (default 60) of wall time: CPU
// of this process (the daemon runs in it) and of its probe children, as a share of one
// core; beside it the same daemon with none.
func BenchmarkRegisteredCPU(b *testing.B) {
	window := 60 * time.Second
	if v, err := strconv.Atoi(os.Getenv("SANDBOXD_BENCH_CPU_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	for _, n := range []int{50, 0} {
		b.Run(fmt.Sprintf("mounts=%d", n), func(b *testing.B) {
			var total, kids []float64
			for i := 0; i < b.N; i++ {
				td := benchDaemon(b)
				var names []string
				for j := 0; j < n; j++ {
					mnt := mountDir(b, fmt.Sprintf("m%d", j))
					fusetest.Start(b, mnt, fusetest.Options{})
					name := fmt.Sprintf("sess-%d", j)
					registerDefaults(b, td, api.MountRegistration{Name: name, Path: mnt})
					names = append(names, name)
				}
				for _, name := range names {
					td.waitMountState(b, name, api.MountHealthy)
				}
				self0, kids0 := cpuTicks(b)
				start := time.Now()
				time.Sleep(window)
				self1, kids1 := cpuTicks(b)
				wall := time.Since(start).Seconds()
				t := float64(self1-self0+kids1-kids0) / 100 / wall * 100
				k := float64(kids1-kids0) / 100 / wall * 100
				total, kids = append(total, t), append(kids, k)
				unhealthy := 0
				for _, name := range names {
					if td.mount(b, name).State != api.MountHealthy {
						unhealthy++
					}
				}
				if unhealthy > 0 {
					b.Fatalf("%d of %d mounts unhealthy after the window", unhealthy, n)
				}
				b.Logf("mounts=%d: %.3f%% of a core over %.0fs (probe children %.3f%%), load %s", n, t, wall, k, loadavg())
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

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := string(b)
	if len(f) > 14 {
		f = f[:14]
	}
	return f
}
