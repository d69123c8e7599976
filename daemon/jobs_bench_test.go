package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The Figures of issue 11, on a real daemon over its Unix socket with the default [jobs]
// settings (ttl 3m, grace 10s) except a cgroup root of the benchmark's own. Run as root:
//
//	go test -run '^$' -bench Jobs -benchtime 1x -timeout 20m ./daemon/
//
// (make bench runs them). docs/benchmarks.md has the figures and the targets.

func jobsBenchDaemon(b *testing.B) (*testDaemon, string) {
	b.Helper()
	root := testenv.CgroupRoot(b)
	td := startDaemon(b, noSites(b.TempDir())+fmt.Sprintf("[jobs]\ncgroup_root = %q\n", root), func(o *Options) {
		o.Config.Health.SampleInterval = time.Second // the default, not the harness's 100 ms
	})
	return td, root
}

// tree starts a shell that forks n sleeping processes, every tenth of them through setsid
// (a detached launcher's double fork), and waits until all n are running; it returns the
// shell and the pids.
func tree(b *testing.B, n int) (*exec.Cmd, []int) {
	b.Helper()
	out := filepath.Join(b.TempDir(), "pids")
	script := fmt.Sprintf(`for i in $(seq %d); do
if [ $((i %% 10)) = 0 ]; then setsid sh -c 'echo $$ >> %s; exec sleep 600' & else sh -c 'echo $$ >> %s; exec sleep 600' & fi
done; wait`, n, out, out)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var pids []int
	testenv.Eventually(b, 30*time.Second, "the tree to start", func() bool {
		data, _ := os.ReadFile(out)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) >= n
	})
	b.Cleanup(func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, pids
}

func left(pids []int) int {
	n := 0
	for _, p := range pids {
		if procAlive(p) {
			n++
		}
	}
	return n
}

// BenchmarkJobsDelete100: POST /v1/jobs then DELETE of a job of 100 processes (a tenth of
// them setsid'd), against a shell loop of kill over pgrep -g on the same tree.
func BenchmarkJobsDelete100(b *testing.B) {
	testenv.RequireCommand(b, "pgrep")
	td, _ := jobsBenchDaemon(b)
	ctx := context.Background()
	var dels, kills []time.Duration
	delLeft, killLeft := 0, 0
	for i := 0; i < b.N; i++ {
		for round := 0; round < 5; round++ {
			// Registered first, then the tree forks inside the job.
			cmd, pids := treeInJob(b, td, fmt.Sprintf("del-%d-%d", i, round), 100)
			start := time.Now()
			j, err := td.client.EndJob(ctx, fmt.Sprintf("del-%d-%d", i, round), true, 10*time.Second)
			took := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			_ = cmd
			b.Logf("round %d: DELETE of %d processes: %s, state %s, left %d", round, len(pids), took.Round(time.Microsecond), j.State, left(pids))

			kcmd, kpids := tree(b, 100)
			start = time.Now()
			loop := exec.Command("/bin/sh", "-c", fmt.Sprintf(`for p in $(pgrep -g %d); do kill $p; done`, kcmd.Process.Pid))
			loop.Run()
			// wait (bounded) for what the loop signalled to exit, as DELETE does
			deadline := time.Now().Add(2 * time.Second)
			for left(kpids) > len(kpids)/10 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			ktook := time.Since(start)
			b.Logf("round %d: kill loop over pgrep -g: %s, left %d of %d (the setsid'd ones)", round, ktook.Round(time.Microsecond), left(kpids), len(kpids))
			dels, kills = append(dels, took), append(kills, ktook)
			delLeft, killLeft = max(delLeft, left(pids)), max(killLeft, left(kpids))
			for _, p := range kpids {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	}
	b.ReportMetric(float64(testenv.Median(dels).Microseconds())/1000, "delete-ms")
	b.ReportMetric(float64(delLeft), "delete-left")
	b.ReportMetric(float64(testenv.Median(kills).Microseconds())/1000, "killloop-ms")
	b.ReportMetric(float64(killLeft), "killloop-left")
}

// treeInJob starts a shell, registers it as job id, then lets it fork n processes (a tenth
// through setsid) and waits until they all run.
func treeInJob(b *testing.B, td *testDaemon, id string, n int) (*exec.Cmd, []int) {
	b.Helper()
	dir := b.TempDir()
	gate, out := filepath.Join(dir, "go"), filepath.Join(dir, "pids")
	script := fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.01; done
for i in $(seq %d); do
if [ $((i %% 10)) = 0 ]; then setsid sh -c 'echo $$ >> %s; exec sleep 600' & else sh -c 'echo $$ >> %s; exec sleep 600' & fi
done; wait`, gate, n, out, out)
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := td.client.RegisterJob(context.Background(), api.JobRequest{ID: id, PID: cmd.Process.Pid}); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(gate, nil, 0o644)
	var pids []int
	testenv.Eventually(b, 30*time.Second, "the job's tree to start", func() bool {
		data, _ := os.ReadFile(out)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) >= n
	})
	return cmd, pids
}

// BenchmarkJobsHeartbeat: p50 of POST /v1/jobs/{id}/heartbeat against GET /livez on the
// same daemon and connection, interleaved in blocks.
func BenchmarkJobsHeartbeat(b *testing.B) {
	td, _ := jobsBenchDaemon(b)
	ctx := context.Background()
	p := jobSleeperB(b)
	if _, err := td.client.RegisterJob(ctx, api.JobRequest{ID: "hb", PID: p}); err != nil {
		b.Fatal(err)
	}
	const block, blocks = 200, 10
	var hb, lz []time.Duration
	for i := 0; i < b.N; i++ {
		for k := 0; k < blocks; k++ {
			for n := 0; n < block; n++ {
				s := time.Now()
				if _, err := td.client.Heartbeat(ctx, "hb", 0); err != nil {
					b.Fatal(err)
				}
				hb = append(hb, time.Since(s))
			}
			for n := 0; n < block; n++ {
				s := time.Now()
				if err := td.client.Livez(ctx); err != nil {
					b.Fatal(err)
				}
				lz = append(lz, time.Since(s))
			}
		}
	}
	h, l := testenv.Median(hb), testenv.Median(lz)
	b.Logf("heartbeat p50 %s, /livez p50 %s: ratio %.2f (target <= 2), %d calls each", h, l, float64(h)/float64(l), len(hb))
	b.ReportMetric(float64(h.Nanoseconds())/1000, "heartbeat-p50-us")
	b.ReportMetric(float64(l.Nanoseconds())/1000, "livez-p50-us")
}

func jobSleeperB(b *testing.B) int {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func rssBytes() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkJobs1000Idle: 1,000 live jobs, each one sleeping process; the daemon's CPU
// while they idle for 20 s, and its RSS growth per job (the daemon runs in this process:
// the figure is this process's RSS, measured after a GC).
func BenchmarkJobs1000Idle(b *testing.B) {
	td, _ := jobsBenchDaemon(b)
	ctx := context.Background()
	const n = 1000
	out := filepath.Join(b.TempDir(), "pids")
	holder := exec.Command("/bin/sh", "-c", fmt.Sprintf(`for i in $(seq %d); do sleep 3600 & echo $! >> %s; done; wait`, n, out))
	if err := holder.Start(); err != nil {
		b.Fatal(err)
	}
	var pids []int
	b.Cleanup(func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		holder.Process.Kill()
		holder.Wait()
	})
	testenv.Eventually(b, 60*time.Second, "1,000 sleepers", func() bool {
		data, _ := os.ReadFile(out)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) >= n
	})
	for i := 0; i < b.N; i++ {
		runtime.GC()
		before := rssBytes()
		start := time.Now()
		for k, p := range pids {
			if _, err := td.client.RegisterJob(ctx, api.JobRequest{ID: fmt.Sprintf("idle-%d", k), PID: p, TTL: dur(time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
		reg := time.Since(start)
		runtime.GC()
		after := rssBytes()
		time.Sleep(2 * time.Second)
		cpu0, t0 := testenv.SelfCPU(), time.Now()
		time.Sleep(20 * time.Second)
		cpu := testenv.SelfCPU() - cpu0
		wall := time.Since(t0)
		share := float64(cpu) / float64(wall) * 100
		b.Logf("1,000 registrations in %s (%s each); RSS %d -> %d KiB: %.1f KiB per job; idle CPU %.3f%% of a core over %s (target < 0.5%%)",
			reg.Round(time.Millisecond), (reg / n).Round(time.Microsecond), before>>10, after>>10, float64(after-before)/1024/n, share, wall.Round(time.Second))
		b.ReportMetric(share, "idle-cpu-%")
		b.ReportMetric(float64(after-before)/1024/n, "rss-KiB/job")
	}
}

// BenchmarkJobsLapseToEmpty: a job of 10 processes that exit on SIGTERM, ttl 1s: the time
// from its lease_expires_at until its cgroup is empty (target <= 1 s + grace).
func BenchmarkJobsLapseToEmpty(b *testing.B) {
	td, root := jobsBenchDaemon(b)
	for i := 0; i < b.N; i++ {
		var lat []time.Duration
		for round := 0; round < 5; round++ {
			id := fmt.Sprintf("lapse-%d-%d", i, round)
			cmd, _ := treeInJobTTL(b, td, id, 10, time.Second)
			j, _ := td.client.Job(context.Background(), id)
			dir := filepath.Join(root, "jobs", id)
			emptyAt := waitEmpty(b, dir)
			d := emptyAt.Sub(j.LeaseExpiresAt)
			lat = append(lat, d)
			b.Logf("round %d: lease lapsed at %s, cgroup empty %s later", round, j.LeaseExpiresAt.Format("15:04:05.000"), d.Round(time.Millisecond))
			_ = cmd
		}
		m := testenv.Median(lat)
		b.Logf("lapse to empty: median %s over %d rounds (target <= 1s + grace, grace 10s; these processes exit on SIGTERM)", m.Round(time.Millisecond), len(lat))
		b.ReportMetric(float64(m.Milliseconds()), "lapse-to-empty-ms")
	}
}

func treeInJobTTL(b *testing.B, td *testDaemon, id string, n int, ttl time.Duration) (*exec.Cmd, []int) {
	b.Helper()
	// the shell is registered before it forks: it waits on a gate
	gate := filepath.Join(b.TempDir(), "go")
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.01; done; for i in $(seq %d); do sleep 600 & done; wait`, gate, n))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := td.client.RegisterJob(context.Background(), api.JobRequest{ID: id, PID: cmd.Process.Pid, TTL: dur(ttl)}); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(gate, nil, 0o644)
	return cmd, nil
}

// waitEmpty returns when dir's cgroup.events says populated 0 (or the cgroup is gone),
// watching it with inotify.
func waitEmpty(b *testing.B, dir string) time.Time {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	unix.InotifyAddWatch(fd, filepath.Join(dir, "cgroup.events"), unix.IN_MODIFY|unix.IN_DELETE_SELF)
	buf := make([]byte, 4096)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || strings.Contains(string(data), "populated 0") {
			return time.Now()
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		unix.Poll(fds, 100)
		if fds[0].Revents&unix.POLLIN != 0 {
			unix.Read(fd, buf)
		}
	}
	b.Fatal("the cgroup did not empty within 60s")
	return time.Time{}
}
