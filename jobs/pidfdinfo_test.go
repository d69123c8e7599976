package jobs

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 27: Adopt takes the reported child's pid and parent from PIDFD_GET_INFO where the
// kernel has it; they must be what /proc and fdinfo say, and a reaped process must not be
// taken (the reads decide then, and refuse it).
func TestPidfdInfoAgreesWithProc(t *testing.T) {
	c := exec.Command("sleep", "600")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	fd, err := unix.PidfdOpen(c.Process.Pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	pid, ppid, ok := pidfdInfo(fd)
	if !ok {
		// Only a kernel without the ioctl (before 6.13) may say nothing for a live child.
		info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
		if err := unix.IoctlPidfdInfo(fd, &info); !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
			t.Fatalf("pidfdInfo gave nothing for a live child, but PIDFD_GET_INFO answers %v", err)
		}
		return
	}
	p := &Peer{Pidfd: fd}
	if err := p.readFdinfo(); err != nil {
		t.Fatal(err)
	}
	if pid != c.Process.Pid || pid != p.PID {
		t.Errorf("pidfdInfo pid %d, want %d (fdinfo %d)", pid, c.Process.Pid, p.PID)
	}
	if want := parentOf("/proc", pid); ppid != os.Getpid() || ppid != want {
		t.Errorf("pidfdInfo parent %d, want this process %d (/proc/%d/status: %d)", ppid, os.Getpid(), pid, want)
	}
	c.Process.Kill()
	c.Wait() // reaped
	if pid, ppid, ok := pidfdInfo(fd); ok {
		t.Errorf("a reaped process: pidfdInfo gave pid %d, parent %d", pid, ppid)
	}
}

// readCgroupFile reads all of a file longer than its first buffer, and says which file
// it could not open.
func TestReadCgroupFile(t *testing.T) {
	big := t.TempDir() + "/big"
	b := make([]byte, 0, 100_000)
	for i := 0; len(b) < 100_000; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	os.WriteFile(big, b, 0o644)
	got, err := readCgroupFile(big)
	if err != nil || string(got) != string(b) {
		t.Errorf("read %d of %d bytes: %v", len(got), len(b), err)
	}
	if _, err := readCgroupFile(big + ".missing"); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a missing file: %v, want ENOENT", err)
	}
}
