package testenv

import (
	"os/exec"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// SelfCPU is this process's user+system time so far: benchmarks that race a tool in a
// child process compare it with the child's rusage.
func SelfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Median is the median of d (the upper one of an even count); d is not reordered.
func Median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// SyncFS flushes every filesystem, so a timed run does not pay for the setup's writeback.
func SyncFS() { exec.Command("sync").Run() }
