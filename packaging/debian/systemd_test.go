package debian

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// testConfig is what the administrator of the test writes over the packaged config: it
// enforces (remount commands run only then), but watches only a tmpfs of the test and
// discovers no cache, so the daemon cannot touch this machine's files.
func testConfig(watched, mnt string, remount []string) string {
	q := make([]string, len(remount))
	for i, a := range remount {
		q[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf(`version = 1
[[site]]
name = "launcher"
path = %q
max_age = "1h"
min_age = "0s"
[server]
mode = "enforce"
[metrics]
textfile = "/var/lib/prometheus/node-exporter/sandboxd.prom"
textfile_interval = "1s"
[reclaim]
auto_caches = []
[[filesystem]]
path = %q
reserve = "0"
reclaim_below = "1KiB"
replace_below = "0"
[[mount]]
name = "agent"
path = %q
required = true
probe_interval = "200ms"
probe_timeout = "2s"
canary = true
remount_command = [%s]
max_remounts_per_hour = 30
`, filepath.Join(watched, "site"), watched, mnt, strings.Join(q, ", "))
}

// TestPackageUnderSystemd installs the package under a real systemd (PID 1 of a
// namespace whose /usr, /etc and /var are copy-on-write) and runs the service as
// shipped: policy-rc.d is honoured on install; the hardened unit starts the daemon,
// which probes a FUSE mount, and when its server dies runs the remount command, whose
// new FUSE server (a child of the service: /dev/fuse, mount(2)) brings it back; an
// upgrade restarts the running service; an administrator's disable survives a
// reinstall; remove and purge stop and clean up. It logs systemd-analyze security's
// score for the installed unit.
func TestPackageUnderSystemd(t *testing.T) {
	pkgs := packages(t)
	watched := testenv.Tmpfs(t, 16<<20, 0)
	mnt := filepath.Join(t.TempDir(), "agent")
	os.Mkdir(mnt, 0o755)
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	// The remount command starts a server inside the namespace; its pid files are the
	// namespace's, kept apart from srv's, whose cleanup kills host pids.
	remount := srv.StartCommand()
	for i, a := range remount {
		if a == "--pidfile" || a == "--pidlog" {
			remount[i+1] = "/run/ns-" + strings.TrimPrefix(a, "--")
		}
	}
	// A canary in the host's /tmp: the namespace must not be able to touch it.
	canary, err := os.CreateTemp("", "sandboxd-ns-canary-")
	if err != nil {
		t.Fatal(err)
	}
	canary.Close()
	t.Cleanup(func() {
		if _, err := os.Stat(canary.Name()); err != nil {
			t.Errorf("the namespace deleted a file in the host's /tmp: %v", err)
		}
		os.Remove(canary.Name())
	})
	exe, _ := os.Executable()
	keep := []string{watched, filepath.Dir(mnt), filepath.Dir(exe), filepath.Dir(srv.Backing)}
	sd := startNsSystemd(t, keep)
	if _, err := sd.sh("test -e " + canary.Name()); err == nil {
		t.Fatal("the namespace's /tmp is the host's")
	}
	for _, v := range []string{v1, v2} {
		os.Link(pkgs[v], filepath.Join(sd.run, filepath.Base(pkgs[v])))
		if _, err := os.Stat(filepath.Join(sd.run, filepath.Base(pkgs[v]))); err != nil {
			b, _ := os.ReadFile(pkgs[v])
			os.WriteFile(filepath.Join(sd.run, filepath.Base(pkgs[v])), b, 0o644)
		}
	}
	deb := func(v string) string { return "/run/" + filepath.Base(pkgs[v]) }
	dpkg := func(args string) string {
		return sd.mustSh("DEBIAN_FRONTEND=noninteractive dpkg --force-confold " + args + " 2>&1")
	}

	// Install with a policy-rc.d that forbids starting services (an image build).
	sd.mustSh(`printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d`)
	out := dpkg("-i " + deb(v1))
	if !strings.Contains(out, "policy-rc.d returned 101") {
		t.Errorf("dpkg -i did not consult policy-rc.d:\n%s", out)
	}
	for _, u := range []string{"sandboxd.service", "sandboxd.socket"} {
		if st := sd.show(u, "UnitFileState"); st != "enabled" {
			t.Errorf("%s after install: %s, want enabled", u, st)
		}
		if st := sd.show(u, "ActiveState"); st != "inactive" {
			t.Errorf("%s started although policy-rc.d said 101: %s", u, st)
		}
	}
	sd.mustSh("rm /usr/sbin/policy-rc.d")
	// The boot check (issue 22) is enabled for sysinit.target but never started by the
	// maintainer scripts; started by hand on a disk with room it exits 0 and stays active.
	if st := sd.show("sandboxd-boot.service", "UnitFileState"); st != "enabled" {
		t.Errorf("sandboxd-boot.service after install: %s, want enabled", st)
	}
	if st := sd.show("sandboxd-boot.service", "ActiveState"); st != "inactive" {
		t.Errorf("sandboxd-boot.service started by the install: %s", st)
	}

	// The packaged config starts in observe mode; the test's administrator enforces, on
	// the test's own tmpfs and FUSE mount only.
	if conf := sd.mustSh("cat /etc/sandboxd/sandboxd.toml"); !regexp.MustCompile(`(?m)^mode = "observe"`).MatchString(conf) {
		t.Errorf("the packaged config does not start in observe mode")
	}
	os.WriteFile(filepath.Join(sd.run, "admin.toml"), []byte(testConfig(watched, mnt, remount)), 0o644)
	sd.mustSh("cp /run/admin.toml /etc/sandboxd/sandboxd.toml && /usr/bin/sandboxd config check /etc/sandboxd/sandboxd.toml")
	// An expired launcher file: its prune is a safefs deletion (openat2 walks) under the
	// unit's seccomp filter.
	site := filepath.Join(watched, "site")
	os.Mkdir(site, 0o755)
	expired := filepath.Join(site, "a1b2.out")
	os.WriteFile(expired, []byte("old output\n"), 0o644)
	old := time.Now().Add(-3 * time.Hour)
	os.Chtimes(expired, old, old)
	sd.mustSh("systemctl start sandboxd-boot.service")
	if st, res := sd.show("sandboxd-boot.service", "ActiveState"), sd.show("sandboxd-boot.service", "Result"); st != "active" || res != "success" {
		t.Errorf("sandboxd-boot.service on a disk with room: %s (%s), want active (success)", st, res)
	}
	sd.mustSh("systemctl start sandboxd.socket sandboxd.service")

	c := &client.Client{SocketPath: filepath.Join(sd.run, "sandboxd", "sandboxd.sock")}
	mount := func() api.Mount {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil || len(st.Mounts) != 1 {
			return api.Mount{}
		}
		return st.Mounts[0]
	}
	testenv.Eventually(t, time.Minute, "the service to probe the FUSE mount healthy", func() bool {
		return mount().State == api.MountHealthy
	})
	testenv.Eventually(t, time.Minute, "the service to prune the expired launcher file", func() bool {
		_, err := os.Lstat(expired)
		return os.IsNotExist(err)
	})
	if s := sd.show("sandboxd.service", "StatusText"); s == "" {
		t.Error("the service sent no STATUS=")
	}
	// The textfile, written by the service under UMask=0077, is readable by node_exporter.
	var mode string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := sd.sh("stat -c %a /var/lib/prometheus/node-exporter/sandboxd.prom")
		if mode = strings.TrimSpace(out); err == nil {
			break
		}
	}
	if mode != "644" {
		j, _ := os.ReadFile(filepath.Join(sd.run, "sandboxd-service.log"))
		t.Errorf("textfile mode %q under the unit, want 644; the service's log:\n%s", mode, j)
	}

	// The FUSE server dies; the daemon's remount command, run as a child of the
	// hardened service, mounts a new one.
	srv.Kill()
	testenv.Eventually(t, 60*time.Second, "a remount by the service's remount command", func() bool {
		m := mount()
		return m.State == api.MountHealthy && m.RemountsTotal >= 1
	})
	// The remount succeeds at the first healthy probe (issue 23), which can come before the
	// command, still running, has written its server's pid file: wait for the file.
	pidfile := filepath.Join(sd.run, "ns-pidfile")
	testenv.Eventually(t, time.Minute, "the remount command's server to write its pid file", func() bool {
		b, err := os.ReadFile(pidfile)
		return err == nil && len(b) > 0
	})

	// The ProtectClock= caveat (issue 15: on systemd < 253 it closes the device policy and
	// a remount command opening /dev/fuse gets EPERM), measured with oneshot services and
	// reported; the unit as shipped must let a child open /dev/fuse.
	openFuse := func(name, props string) error {
		unit := "[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\n" + props + "ExecStart=/bin/sh -c 'exec 3<>/dev/fuse'\n"
		os.WriteFile(filepath.Join(sd.run, "systemd", "system", name), []byte(unit), 0o644)
		sd.mustSh("systemctl daemon-reload")
		out, err := sd.sh("systemctl start " + name)
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
		}
		return nil
	}
	if err := openFuse("fuse-open.service", ""); err != nil {
		t.Errorf("a service cannot open /dev/fuse at all: %v", err)
	}
	var version int
	fmt.Sscanf(sd.mustSh("systemctl --version"), "systemd %d", &version)
	// The control: with DevicePolicy=closed the open must fail where device policies are
	// enforced (the devices controller; a nested cgroup may not enforce it).
	closedErr := openFuse("fuse-open-closed.service", "DevicePolicy=closed\n")
	clockErr := openFuse("fuse-open-clock.service", "ProtectClock=yes\n")
	t.Logf("systemd %d: opening /dev/fuse with DevicePolicy=closed: %v; with ProtectClock=yes: %v", version, closedErr, clockErr)
	if closedErr == nil {
		t.Logf("device policies are not enforced in this namespace: the ProtectClock caveat cannot be measured here")
	}

	score := sd.mustSh("systemd-analyze security --no-pager sandboxd.service | tail -1")
	t.Logf("systemd-analyze security sandboxd.service (installed, running): %s", strings.TrimSpace(score))

	// An upgrade restarts the running service with the new binary.
	before := sd.show("sandboxd.service", "MainPID")
	dpkg("-i " + deb(v2))
	testenv.Eventually(t, time.Minute, "the upgraded service to run", func() bool {
		return sd.show("sandboxd.service", "ActiveState") == "active" && sd.show("sandboxd.service", "MainPID") != before
	})
	if v := sd.mustSh("/usr/bin/sandboxd version"); !strings.Contains(v, v2) {
		t.Errorf("after the upgrade: %s", v)
	}
	if conf := sd.mustSh("cat /etc/sandboxd/sandboxd.toml"); !strings.Contains(conf, `mode = "enforce"`) {
		t.Error("the upgrade replaced the administrator's config")
	}

	// The administrator disables sandboxd; a reinstall neither enables nor starts it.
	sd.mustSh("systemctl disable --now sandboxd.service sandboxd.socket")
	dpkg("-i " + deb(v2))
	for _, u := range []string{"sandboxd.service", "sandboxd.socket"} {
		if st := sd.show(u, "UnitFileState"); st != "disabled" {
			t.Errorf("%s after a reinstall: %s, want disabled (the administrator's choice)", u, st)
		}
		if st := sd.show(u, "ActiveState"); st != "inactive" {
			t.Errorf("%s after a reinstall: %s, want inactive", u, st)
		}
	}

	// Enabled and running again, then removed: stopped, units gone, config kept. Before
	// that, a runner started a job that ignores SIGTERM and registered a mount: removal
	// ends the job (SIGTERM, then SIGKILL after its 1s grace, until its cgroup is empty)
	// and releases the mount, and says so (issue 25).
	sd.mustSh("systemctl enable --now sandboxd.socket sandboxd.service")
	sd.mustSh(`setsid /usr/bin/sandboxd run --grace 1s --ttl 1h -- sh -c 'trap "" TERM; exec sleep 3600' >/run/job.log 2>&1 &`)
	var job api.Job
	testenv.Eventually(t, time.Minute, "the runner's job to be registered", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		page, err := c.Jobs(ctx)
		if err == nil && len(page.Jobs) == 1 && page.Jobs[0].State == api.JobRunning {
			job = page.Jobs[0]
		}
		return job.ID != ""
	})
	sess := filepath.Join(watched, "session")
	os.Mkdir(sess, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := c.RegisterMount(ctx, api.MountRegistration{Name: "session", Path: sess}); err != nil {
		t.Fatalf("register a mount: %v", err)
	}
	cancel()
	out = dpkg("--remove sandboxd")
	for _, want := range []string{"ended job " + job.ID, "released mount session"} {
		if !strings.Contains(out, want) {
			t.Errorf("dpkg --remove does not say %q:\n%s", want, out)
		}
	}
	if o, _ := sd.sh(fmt.Sprintf("test -e /proc/%d && cat /proc/%d/cmdline", job.PID, job.PID)); strings.Contains(o, "sleep") {
		t.Errorf("the job's process %d outlived the package's removal", job.PID)
	}
	if o, _ := sd.sh("test -d " + job.Cgroup + "; echo $?"); strings.TrimSpace(o) != "1" {
		t.Errorf("the job's cgroup %s outlived the package's removal", job.Cgroup)
	}
	if st := sd.show("sandboxd.service", "ActiveState"); st != "inactive" {
		t.Errorf("after remove the service is %s", st)
	}
	if out, _ := sd.sh("test -e /usr/lib/systemd/system/sandboxd.service || test -e /usr/bin/sandboxd; echo $?"); strings.TrimSpace(out) != "1" {
		t.Error("remove left the units or the binary")
	}
	if out, _ := sd.sh("test -f /etc/sandboxd/sandboxd.toml && test -d /var/lib/sandboxd; echo $?"); strings.TrimSpace(out) != "0" {
		t.Error("remove took the config or the state")
	}
	// The FUSE server the remount command started above is not a job: it serves the
	// mount, so removal leaves it running, and it keeps the unit's cgroup while it lives.
	// It ends here (as its mount's owner would end it); then purge leaves no cgroup.
	sd.sh("kill $(cat /run/ns-pidfile); for i in $(seq 100); do kill -0 $(cat /run/ns-pidfile) 2>/dev/null || break; sleep 0.1; done")
	dpkg("--purge sandboxd")
	if o, _ := sd.sh(`find /sys/fs/cgroup -type d \( -name sandboxd.service -o -name sandboxd \)`); strings.TrimSpace(o) != "" {
		procs, _ := sd.sh(`for f in $(find /sys/fs/cgroup/unified/system.slice/sandboxd.service -name cgroup.procs); do echo "$f:"; for p in $(cat $f); do tr '\0' ' ' < /proc/$p/cmdline; echo; done; done`)
		t.Errorf("purge left cgroups:\n%s\nprocesses in them:\n%s", o, procs)
	}
	if out, _ := sd.sh("ls -d /etc/sandboxd /var/lib/sandboxd /etc/systemd/system/*.wants/sandboxd.* 2>/dev/null | wc -l"); strings.TrimSpace(out) != "0" {
		t.Errorf("purge left: %s", sd.mustSh("ls -d /etc/sandboxd /var/lib/sandboxd /etc/systemd/system/*.wants/sandboxd.* 2>&1 || true"))
	}
}
