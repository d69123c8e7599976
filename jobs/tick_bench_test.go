package jobs

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// BenchmarkRegisterWithLiveJobs: what one registration costs the process with 100 live
// jobs and with 10,000: each op registers a real process (pre-started) in a real cgroup.
// The live jobs besides are in the registry and its journal only (no process, no cgroup:
// the registration and the dead-man switch read none of theirs), leased for an hour. Reported besides the
// wall time of the call: the process's CPU time per registration (getrusage, so the
// dead-man switch's own goroutine counts), measured once its loop has settled. Issue 27:
// each registration woke a tick that walked every job under the registry's lock, and one
// that joined a shared lease walked every job again to renew the lease's.
//
//	CI=true go test -run '^$' -bench RegisterWithLiveJobs -benchtime=300x ./jobs/
func BenchmarkRegisterWithLiveJobs(b *testing.B) {
	for _, c := range []struct {
		live  int
		lease string
		uid   uint32
	}{{100, "", 0}, {10000, "", 0}, {100, "sess", 0}, {10000, "sess", 0}, {100, "", 65534}, {10000, "", 65534}} {
		live := c.live
		name := fmt.Sprintf("live=%d", live)
		if c.lease != "" {
			name += "/lease" // every registration joins one session lease
		}
		if c.uid != 0 {
			name += "/uid" // registered by uid 65534 (its processes), so max_per_uid is checked
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b, func(o *Options) {
				o.MaxJobs, o.MaxPerUID, o.DefaultTTL, o.SweepInterval, o.Logger = live+b.N+16, b.N+16, time.Hour, time.Hour, nil
			})
			boot := boottime()
			f.m.mu.Lock()
			for i := range live {
				id := fmt.Sprintf("resident-%05d", i)
				f.m.jobs[id] = &job{ID: id, State: api.JobRunning, Cgroup: "/nonexistent/" + id, StartBoot: boot,
					LeaseBoot: boot + int64(time.Hour), DeadlineBoot: boot + int64(2*time.Hour), TTL: time.Hour, done: make(chan struct{})}
			}
			f.m.compactLocked() // the journal holds them, as it would had they registered
			f.m.mu.Unlock()
			b.Cleanup(func() {
				f.m.mu.Lock()
				for i := range live {
					delete(f.m.jobs, fmt.Sprintf("resident-%05d", i))
				}
				f.m.mu.Unlock()
			})
			pids := make([]int, b.N)
			for i := range pids {
				if c.uid == 0 {
					pids[i] = spawn(b, `exec sleep 600`).Process.Pid
					continue
				}
				p := exec.Command("sleep", "600")
				p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.uid}}
				if err := p.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { p.Process.Kill(); p.Wait() })
				pids[i] = p.Process.Pid
			}
			settle := func() {
				// The loop has ticked, taken any wake and finished its walk once the wake
				// channel is empty and mu is free.
				for {
					f.m.mu.Lock()
					ticked := f.m.armedAt != 0
					f.m.mu.Unlock()
					if ticked && len(f.m.wake) == 0 {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			settle()
			var r0, r1 unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &r0)
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("bench-%05d", i), PID: pids[i], Lease: c.lease}, Caller{UID: c.uid}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			settle()
			unix.Getrusage(unix.RUSAGE_SELF, &r1)
			cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/registration")
		})
	}
}
