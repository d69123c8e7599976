package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// boottime is CLOCK_BOOTTIME in nanoseconds: it counts the time a VM was paused or the
// host suspended, and never jumps with the wall clock, so a lease does not lapse for
// every job at once when a paused sandbox resumes and the wall clock catches up.
func boottime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// bootID names this boot; leases of another boot mean nothing (their cgroups are gone).
func bootID(procRoot string) string {
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's start time (100 on every Linux
// architecture Go supports).
const clockTicks = 100

// startTicks is a process's start time in clock ticks since boot (/proc/PID/stat field
// 22), and its real uid from /proc/PID/status; ok is false when it is gone.
func procInfo(procRoot string, pid int) (ticks uint64, uid uint32, ok bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, false
	}
	ticks, _ = strconv.ParseUint(f[19], 10, 64) // field 22 is the 20th after "(comm)"
	st, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				n, _ := strconv.ParseUint(fs[0], 10, 32)
				uid = uint32(n)
			}
		}
	}
	return ticks, uid, true
}

func accessW(dir string) error {
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return &os.PathError{Op: "access (write)", Path: dir, Err: err}
	}
	return nil
}
