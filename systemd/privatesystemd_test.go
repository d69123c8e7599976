package systemd

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// privateSystemd is a real systemd running as PID 1 of a private PID, mount, cgroup, UTS
// and IPC namespace (FIELD-NOTES, "This machine, for tests"). Its /run is a directory
// of the test (so the test reaches its sockets from outside), /etc/systemd/system is an
// empty tmpfs, /var/lib a directory of the test, and its cgroups are a subtree of the test's own: it boots only
// sandboxd-test.target and touches nothing of the host. Killing its PID 1 ends it all.
type privateSystemd struct {
	t   *testing.T
	run string // host path of the namespace's /run
	pid int    // host pid of the namespace's PID 1
}

const testTarget = "sandboxd-test.target"

// startPrivateSystemd boots systemd with units (name -> text) in its /run/systemd/system.
func startPrivateSystemd(t *testing.T, units map[string]string) *privateSystemd {
	t.Helper()
	testenv.RequireRoot(t)
	sd := testenv.RequireCommand(t, "/lib/systemd/systemd")
	for _, c := range []string{"unshare", "nsenter", "systemctl", "mount"} {
		testenv.RequireCommand(t, c)
	}
	dir := t.TempDir()
	p := &privateSystemd{t: t, run: filepath.Join(dir, "run")}
	unitDir := filepath.Join(p.run, "systemd", "system")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	units[testTarget] = "[Unit]\nDescription=sandboxd test target\nDefaultDependencies=no\n"
	for name, text := range units { // name may be a drop-in: "x.service.d/y.conf"
		if err := os.MkdirAll(filepath.Dir(filepath.Join(unitDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unitDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cgroups := testenv.MakeCgroups(t, fmt.Sprintf("sandboxd-systemd-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	script := bootScript(dir, p, cgroups, sd)
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
		"--uts", "--ipc", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0")
	logf, err := os.Create(filepath.Join(dir, "unshare.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies, unshare dies, and --kill-child takes the namespace along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.pid > 0 {
			syscall.Kill(p.pid, syscall.SIGKILL) // PID 1 of the namespace: the kernel ends the rest
		}
		cmd.Process.Kill()
		cmd.Wait()
		testenv.RemoveCgroups(t, cgroups)
		if t.Failed() {
			h, _ := os.ReadFile(filepath.Join(p.run, "helper.log"))
			u, _ := os.ReadFile(filepath.Join(dir, "unshare.log"))
			t.Logf("services' log (/run/helper.log):\n%s\nunshare:\n%s", tail(h, 40), u)
		}
	})

	// PID 1 of the namespace is unshare's only child.
	waitFor(t, "the namespace's PID 1", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 1 {
			p.pid, _ = strconv.Atoi(f[0])
		}
		return p.pid > 0
	})
	waitFor(t, "the private systemd to finish booting", func() bool {
		out, _ := p.systemctl("is-system-running")
		s := strings.TrimSpace(out)
		return s == "running" || s == "degraded"
	})
	return p
}

// systemctl runs systemctl inside the namespace and returns its combined output.
func (p *privateSystemd) systemctl(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(p.pid), "-p", "-m", "systemctl", "--no-pager"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// show answers `systemctl show -p` for unit as a map.
func (p *privateSystemd) show(unit string, props ...string) map[string]string {
	p.t.Helper()
	out, err := p.systemctl("show", "-p", strings.Join(props, ","), unit)
	if err != nil {
		p.t.Fatalf("systemctl show %s: %v\n%s", unit, err, out)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

func bootScript(dir string, p *privateSystemd, cgroups []testenv.CgroupDir, sd string) string {
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintln(&b, "set -eu")
	// Let go of the copies of other tests' FUSE mounts, or their servers outlive their unmount.
	fmt.Fprintln(&b, testenv.DetachFUSECopies())
	for _, c := range cgroups {
		fmt.Fprintf(&b, "echo 0 > %s\n", q(filepath.Join(c.Dir, "cgroup.procs")))
	}
	fmt.Fprintf(&b, "mount --bind %s /run\n", q(p.run))
	fmt.Fprintln(&b, "mount -t tmpfs -o size=1m,mode=0755 sandboxd-test /etc/systemd/system")
	// StateDirectory= and systemd's own state land in the test's directory.
	varLib := filepath.Join(dir, "var-lib")
	fmt.Fprintf(&b, "mkdir -p %s && mount --bind %s /var/lib\n", q(varLib), q(varLib))
	// systemd remounts /sys/fs/cgroup read-only and creates hierarchies in it: give it a
	// private tmpfs holding only our own cgroups, rooted there by a cgroup namespace.
	stage := filepath.Join(dir, "cgroup-stage")
	fmt.Fprintf(&b, "mkdir -p %s && mount --rbind /sys/fs/cgroup %s\n", q(stage), q(stage))
	if !slices.ContainsFunc(cgroups, func(c testenv.CgroupDir) bool { return c.Mountpoint == "/sys/fs/cgroup" }) {
		fmt.Fprintln(&b, "mount -t tmpfs -o mode=0755 sandboxd-test-cgroup /sys/fs/cgroup")
	}
	for _, c := range cgroups {
		src := filepath.Join(stage, strings.TrimPrefix(c.Dir, "/sys/fs/cgroup"))
		fmt.Fprintf(&b, "mkdir -p %s && mount --bind %s %s\n", q(c.Mountpoint), q(src), q(c.Mountpoint))
	}
	fmt.Fprintf(&b, "umount -l %s\n", q(stage))
	fmt.Fprintf(&b, "exec unshare --cgroup %s --system --unit=%s --log-level=info --log-color=no\n", sd, testTarget)
	return b.String()
}

func tail(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
