package debian

import (
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

// nsSystemd is systemd as PID 1 of a private PID, mount, cgroup, UTS and IPC namespace
// in which /usr, /etc and /var are copy-on-write overlays of the host's (their upper
// layers on a tmpfs of the namespace): dpkg -i there installs for real, into the host's
// package database as the namespace sees it, and leaves the host untouched. /run is a
// directory of the test (so the test reaches the API socket from outside). /tmp is a
// tmpfs of its own holding only the host directories the test names (keep). Its
// cgroups are a subtree of the test's own. Killing its PID 1 ends it all.
//
// Nothing in it may reach the host's files: sysinit.target, basic.target and the units
// they pull in that act on the whole machine (systemd-tmpfiles-setup cleans /tmp, sysctl,
// binfmt, udev, swap ...) are masked, and the package's units get a drop-in with
// DefaultDependencies=no, the only change to them. A first version of this test without
// these let the packaged service pull in sysinit.target, and systemd-tmpfiles-setup
// emptied the host's /tmp.
//
// The cgroup set-up follows systemd/privatesystemd_test.go (which boots bare units, not
// a package, and cannot be imported from here).
type nsSystemd struct {
	t   *testing.T
	run string // host path of the namespace's /run
	pid int    // host pid of the namespace's PID 1
}

const nsTarget = "sandboxd-test.target"

// masked are the units a packaged service could pull in that act on the host.
var masked = []string{
	"sysinit.target", "basic.target", "local-fs.target", "swap.target", "timers.target",
	"systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-tmpfiles-clean.service",
	"systemd-tmpfiles-clean.timer", "systemd-sysctl.service", "systemd-binfmt.service", "systemd-modules-load.service",
	"systemd-udevd.service", "systemd-udev-trigger.service", "systemd-remount-fs.service", "systemd-random-seed.service",
	"systemd-journal-flush.service", "systemd-update-utmp.service", "systemd-machine-id-commit.service",
}

func startNsSystemd(t *testing.T, keep []string) *nsSystemd {
	t.Helper()
	testenv.RequireRoot(t)
	sd := testenv.RequireCommand(t, "/lib/systemd/systemd")
	for _, c := range []string{"unshare", "nsenter", "systemctl", "mount"} {
		testenv.RequireCommand(t, c)
	}
	dir := t.TempDir()
	p := &nsSystemd{t: t, run: filepath.Join(dir, "run")}
	units := filepath.Join(p.run, "systemd", "system")
	for _, d := range []string{"sandboxd.service.d", "sandboxd.socket.d"} {
		os.MkdirAll(filepath.Join(units, d), 0o755)
		os.WriteFile(filepath.Join(units, d, "no-default-deps.conf"), []byte("[Unit]\nDefaultDependencies=no\n"), 0o644)
	}
	// The service's log, where the test can read it (the namespace keeps no journal).
	os.WriteFile(filepath.Join(units, "sandboxd.service.d", "log.conf"),
		[]byte("[Service]\nStandardOutput=append:/run/sandboxd-service.log\nStandardError=append:/run/sandboxd-service.log\n"), 0o644)
	os.WriteFile(filepath.Join(units, nsTarget), []byte("[Unit]\nDescription=sandboxd test target\nDefaultDependencies=no\n"), 0o644)
	for _, u := range masked {
		if err := os.Symlink("/dev/null", filepath.Join(units, u)); err != nil {
			t.Fatal(err)
		}
	}

	cgroups := testenv.MakeCgroups(t, fmt.Sprintf("sandboxd-deb-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
		"--uts", "--ipc", "/bin/sh", "-c", nsBootScript(dir, p.run, keep, cgroups, sd))
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0")
	logf, err := os.Create(filepath.Join(dir, "unshare.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.pid > 0 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
		testenv.RemoveCgroups(t, cgroups)
		if t.Failed() {
			u, _ := os.ReadFile(filepath.Join(dir, "unshare.log"))
			t.Logf("unshare:\n%s", u)
		}
	})
	testenv.Eventually(t, time.Minute, "the namespace's PID 1", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(b)); err == nil && len(f) == 1 {
			p.pid, _ = strconv.Atoi(f[0])
		}
		return p.pid > 0
	})
	testenv.Eventually(t, time.Minute, "the namespace's systemd to finish booting", func() bool {
		out, _ := p.sh("systemctl is-system-running")
		s := strings.TrimSpace(out)
		return s == "running" || s == "degraded"
	})
	return p
}

// sh runs a shell command inside the namespace (its PID and mount namespaces).
func (p *nsSystemd) sh(script string) (string, error) {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(p.pid), "-p", "-m", "/bin/sh", "-c", script).CombinedOutput()
	return string(out), err
}

func (p *nsSystemd) mustSh(script string) string {
	p.t.Helper()
	out, err := p.sh(script)
	if err != nil {
		p.t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return out
}

func (p *nsSystemd) show(unit, prop string) string {
	p.t.Helper()
	return strings.TrimSpace(p.mustSh("systemctl show --value -p " + prop + " " + unit))
}

func nsBootScript(dir, run string, keep []string, cgroups []testenv.CgroupDir, sd string) string {
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintln(&b, "set -eu")
	// Let go of the copies of other tests' FUSE mounts (their servers would outlive their
	// unmount); those under keep are the test's own.
	fmt.Fprintln(&b, testenv.DetachFUSECopies(keep...))
	for _, c := range cgroups {
		fmt.Fprintf(&b, "echo 0 > %s\n", q(filepath.Join(c.Dir, "cgroup.procs")))
	}
	fmt.Fprintf(&b, "mount --bind %s /run\n", q(run))
	// Copy-on-write /usr, /etc and /var: what dpkg writes stays in the namespace.
	ovl := filepath.Join(dir, "overlay")
	fmt.Fprintf(&b, "mkdir -p %s && mount -t tmpfs -o size=1g,mode=0755 sandboxd-test-overlay %s\n", q(ovl), q(ovl))
	for _, tree := range []string{"usr", "etc", "var"} {
		up, work := filepath.Join(ovl, tree+"-upper"), filepath.Join(ovl, tree+"-work")
		fmt.Fprintf(&b, "mkdir -p %s %s && mount -t overlay -o lowerdir=/%s,upperdir=%s,workdir=%s sandboxd-test /%s\n",
			q(up), q(work), tree, q(up), q(work), tree)
	}
	fmt.Fprintln(&b, "mount -t tmpfs -o size=1m,mode=0755 sandboxd-test /etc/systemd/system")
	// A /tmp of its own, with the host directories the test needs bound back in.
	for i, k := range keep {
		st := fmt.Sprintf("/run/.keep-%d", i)
		fmt.Fprintf(&b, "mkdir -p %s && mount --rbind %s %s\n", st, q(k), st)
	}
	fmt.Fprintln(&b, "mount -t tmpfs -o size=64m,mode=1777 sandboxd-test-tmp /tmp")
	for i, k := range keep {
		st := fmt.Sprintf("/run/.keep-%d", i)
		fmt.Fprintf(&b, "mkdir -p %s && mount --rbind %s %s && umount -l %s && rmdir %s\n", q(k), st, q(k), st, st)
	}
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
	fmt.Fprintf(&b, "exec unshare --cgroup %s --system --unit=%s --log-level=info --log-color=no\n", sd, nsTarget)
	return b.String()
}
