package retention

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/proclocks"
)

// procStat is what sandboxd needs of /proc/PID/stat.
type procStat struct {
	state      byte
	startTicks uint64 // field 22: start time in clock ticks since boot
}

// parseStat parses /proc/PID/stat. comm (field 2) may hold spaces and parentheses, so the
// fields after it are found from the LAST ')' (proc(5)).
func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no ')' after comm")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("stat: too few fields")
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, errors.New("stat: bad starttime")
	}
	return procStat{state: f[0][0], startTicks: t}, nil
}

// proc reads the process side of liveness beneath a proc root.
type proc struct {
	root     string
	timeout  time.Duration
	lockFile *proclocks.Reader

	mu       sync.Mutex                 // guards inflight
	inflight map[int]chan cmdlineResult // cmdline reads not yet answered
}

type cmdlineResult struct {
	args []string
	err  error
}

func newProc(root string, timeout time.Duration) *proc {
	return &proc{root: root, timeout: timeout, inflight: map[int]chan cmdlineResult{}, lockFile: proclocks.NewReader(root)}
}

// locks reads /proc/locks (see package proclocks).
func (p *proc) locks() (map[proclocks.Inode]struct{}, error) { return p.lockFile.Read() }

// pids lists the live process ids (the numeric names of the proc root).
func (p *proc) pids() (map[int32]struct{}, error) {
	d, err := os.Open(p.root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	out := make(map[int32]struct{}, len(names))
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		if v, e := strconv.ParseInt(n, 10, 32); e == nil {
			out[int32(v)] = struct{}{}
		}
	}
	return out, err
}

// stat reads /proc/PID/stat; ok is false when the process is gone or a zombie (it ended;
// only its exit status waits to be reaped).
func (p *proc) stat(pid int32) (procStat, bool) {
	if p.root == "/proc" && unix.Kill(int(pid), 0) == unix.ESRCH {
		// No such process: one syscall, where the failed open costs a path walk. A
		// drain rechecks every job of every batch, nearly all of them long dead.
		return procStat{}, false
	}
	data, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(int(pid)), "stat"))
	if err != nil {
		return procStat{}, false
	}
	st, err := parseStat(data)
	if err != nil || st.state == 'Z' || st.state == 'X' || st.state == 'x' {
		return procStat{}, false
	}
	return st, true
}

// holdsUnder reports whether pid has an open fd on a path that match accepts. It uses
// readlink on /proc/PID/fd/N only: a stat there would reach the file itself, which may sit
// on a hung FUSE mount.
func (p *proc) holdsUnder(pid int32, match func(string) bool) bool {
	dir := filepath.Join(p.root, strconv.Itoa(int(pid)), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		target, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue
		}
		if match(strings.TrimSuffix(target, " (deleted)")) {
			return true
		}
	}
	return false
}

// errCmdlineTimeout: the read did not answer in time (the process may be stuck in a FUSE
// page fault holding its mmap lock); the caller cannot know and keeps the files.
var errCmdlineTimeout = errors.New("reading cmdline timed out")

// cmdline reads /proc/PID/cmdline off the caller's goroutine with a timeout. At most one
// read per pid is outstanding: a read that hangs is waited for again by the next call
// rather than piling up goroutines.
func (p *proc) cmdline(pid int32) ([]string, error) {
	p.mu.Lock()
	ch, ok := p.inflight[int(pid)]
	if !ok {
		ch = make(chan cmdlineResult, 1)
		p.inflight[int(pid)] = ch
		go func() {
			data, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(int(pid)), "cmdline"))
			ch <- cmdlineResult{args: splitCmdline(data), err: err}
		}()
	}
	p.mu.Unlock()
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		p.mu.Lock()
		delete(p.inflight, int(pid))
		p.mu.Unlock()
		return r.args, r.err
	case <-t.C:
		return nil, errCmdlineTimeout
	}
}

func splitCmdline(data []byte) []string {
	data = bytes.TrimRight(data, "\x00")
	if len(data) == 0 {
		return nil
	}
	return strings.Split(string(data), "\x00")
}

// namesJob reports whether a command line names the job: an argument that is the id or the
// launch script, or a path whose last element is the id or starts with "<id>." (such as
// "/tmp/aura-bg/a1b2.launch.sh").
func namesJob(args []string, id string) bool {
	if id == "" {
		return false
	}
	script := id + ".launch.sh"
	for _, a := range args {
		if a == id || strings.Contains(a, script) {
			return true
		}
		base := a[strings.LastIndexByte(a, '/')+1:]
		if base == id || strings.HasPrefix(base, id+".") {
			return true
		}
	}
	return false
}

// bootID identifies this boot: start ticks from another boot mean nothing.
func (p *proc) bootID() string {
	b, err := os.ReadFile(filepath.Join(p.root, "sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
