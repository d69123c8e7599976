package jobs

import (
	"fmt"
	"os"
	"sort"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// BenchmarkRegistrationPath shows where a registration's time goes (issue 27 items 1-2),
// as medians over 25 calls of each, against one registry in a tmpfs registry_dir (as
// /run/sandboxd): the journal's append of one job record (a write(), no fsync: the part
// of the answer's path that persistence costs), a registration by migration of a sleeping
// process (mkdir, journal, the write to cgroup.procs), and a spawned one (Reserve: mkdir,
// journal, open; clone3(CLONE_INTO_CGROUP) of /bin/true; Adopt: checks, journal), beside
// the same fork and exec of /bin/true without CLONE_INTO_CGROUP; and for a /bin/true gone
// before its report, Adopt (up to the answer) and Settle (the job's end, after it).
//
//	CI=true go test -run '^$' -bench RegistrationPath -benchtime=1x ./jobs/
func BenchmarkRegistrationPath(b *testing.B) {
	const n = 25
	shm, err := os.MkdirTemp("/dev/shm", "sandboxd-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(shm) // by path: the benchmark's own temp dir
	for range b.N {
		f := newFixture(b, func(o *Options) { o.RegistryDir = shm + "/registry"; o.DefaultTTL = time.Hour })
		self, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			b.Fatal(err)
		}
		peer := &Peer{Pidfd: self}
		peer.readFdinfo()
		by := Caller{UID: 0, Peer: peer}
		var journal, migrate, spawned, reserve, clone, adopt, plain, adoptGone, settleGone []time.Duration
		for i := range n {
			c := job{ID: fmt.Sprintf("j-%03d", i), Cgroup: f.root + "/jobs/x", State: api.JobRunning}
			t0 := time.Now()
			f.m.mu.Lock()
			f.m.logLocked(record{Op: "put", Job: &c})
			f.m.mu.Unlock()
			journal = append(journal, time.Since(t0))

			p := spawn(b, `exec sleep 600`)
			t0 = time.Now()
			if _, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("m-%03d", i), PID: p.Process.Pid}, Caller{}); err != nil {
				b.Fatal(err)
			}
			migrate = append(migrate, time.Since(t0))

			t0 = time.Now()
			sp, err := f.m.Reserve(api.JobRequest{ID: fmt.Sprintf("s-%03d", i)}, by)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			pidfd := -1
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.Fd, PidFD: &pidfd}})
			if err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if _, err := sp.Adopt(pidfd); err != nil {
				b.Fatal(err)
			}
			spawned = append(spawned, time.Since(t0))
			reserve, clone, adopt = append(reserve, t1.Sub(t0)), append(clone, t2.Sub(t1)), append(adopt, time.Since(t2))
			sp.Settle()
			unix.Close(pidfd)
			syscall.Wait4(pid, nil, 0, nil)

			// The same with /bin/true gone before its report (exited, not reaped): Adopt
			// (up to the answer) and Settle (after it: the job's end).
			sp, err = f.m.Reserve(api.JobRequest{ID: fmt.Sprintf("g-%03d", i)}, by)
			if err != nil {
				b.Fatal(err)
			}
			if pid, err = syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.Fd, PidFD: &pidfd}}); err != nil {
				b.Fatal(err)
			}
			var info unix.Siginfo
			for unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
			}
			t0 = time.Now()
			if _, err := sp.Adopt(pidfd); err != nil {
				b.Fatal(err)
			}
			t1 = time.Now()
			sp.Settle()
			adoptGone, settleGone = append(adoptGone, t1.Sub(t0)), append(settleGone, time.Since(t1))
			if j, _ := f.m.Get(fmt.Sprintf("g-%03d", i)); j.State != api.JobEnded {
				b.Fatalf("a spawned /bin/true gone before its report: %s after Settle, want ended", j.State)
			}
			unix.Close(pidfd)
			syscall.Wait4(pid, nil, 0, nil)

			t0 = time.Now() // the baseline: the same fork and exec, in this process's cgroup
			if pid, err = syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{}); err != nil {
				b.Fatal(err)
			}
			plain = append(plain, time.Since(t0))
			syscall.Wait4(pid, nil, 0, nil)
		}
		peer.Close()
		med := func(d []time.Duration) float64 {
			sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
			return float64(d[len(d)/2].Microseconds())
		}
		b.ReportMetric(med(journal), "journal-µs")
		b.ReportMetric(med(migrate), "migrate-µs")
		b.ReportMetric(med(spawned), "spawn-µs")
		b.ReportMetric(med(reserve), "reserve-µs")
		b.ReportMetric(med(clone), "clone3-µs")
		b.ReportMetric(med(adopt), "adopt-µs")
		b.ReportMetric(med(plain), "forkexec-µs")
		b.ReportMetric(med(adoptGone), "adopt-gone-µs")
		b.ReportMetric(med(settleGone), "settle-gone-µs")
	}
}
